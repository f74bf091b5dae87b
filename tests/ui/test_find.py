"""Finding a run in the web view, in a real headless browser: the search
box takes a run's id, the start of one or its idempotency key; the filters
(state, job type, version, key, age) live in the URL, so a link shares them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from test_browser import rows, text
from ui_jobs import Explode, Invoice, Nap, Ship
from ui_kit import Runs, wait_for

from stepstone import JobRunner


def find(browser: Any, what: str) -> None:
    """Type ``what`` in the header's search box and press Enter, as a user would."""
    box = browser.find_element(By.CSS_SELECTOR, "header form.search input[name=q]")
    box.clear()
    box.send_keys(what + "\n")


@pytest.mark.parametrize("store_url", ["s3"], indirect=True)  # a store name, not a path
async def test_the_search_box_finds_a_run_by_id_prefix_or_key(
    runs: Runs, ui: str, browser: Any, tmp_path: Path
) -> None:
    runner = JobRunner(runs.store, jobs=[Ship, Explode, Nap, Invoice])  # submits only
    try:
        first = await runner.submit(Invoice(number=1001))
        second = await runner.submit(Invoice(number=1002))
    finally:
        await runner.close()
    browser.get(ui)
    for what, expected in (
        (runs.dead, runs.dead),  # a whole id
        (runs.succeeded[:8], runs.succeeded),  # the start of one
        ("invoice-1001", first.id),  # an idempotency key
    ):
        find(browser, what)
        wait_for(lambda e=expected: browser.current_url == f"{ui}runs/{e}", f"{what}'s page")
        assert expected in text(browser, "dl.summary")
    assert "invoice-1001" in text(browser, "dl.summary")  # its key, shown

    # No run has it as its id or key: the runs whose keys start with it.
    find(browser, "invoice-10")
    wait_for(lambda: "q=invoice-10" in browser.current_url, "the list")
    assert set(rows(browser)) == {first.id, second.id}
    assert "No run has the id or the idempotency key invoice-10" in text(browser, "main")
    screenshot = tmp_path / "ui-search.png"
    assert browser.save_screenshot(str(screenshot))
    find(browser, "nothing-like-it")
    wait_for(lambda: "q=nothing-like-it" in browser.current_url, "the list")
    assert rows(browser) == {}


async def test_the_filters_are_held_in_the_url(runs: Runs, ui: str, browser: Any) -> None:
    runner = JobRunner(runs.store, jobs=[Invoice])  # submits only
    try:
        invoice = await runner.submit(Invoice(number=7))
    finally:
        await runner.close()
    browser.get(ui)
    browser.find_element(By.NAME, "version").send_keys("v2")
    browser.find_element(By.NAME, "since").send_keys("1h")
    browser.find_element(By.CSS_SELECTOR, "form.filters button").click()
    wait_for(lambda: "version=v2" in browser.current_url, "the filters in the URL")
    shared = browser.current_url
    assert "since=1h" in shared
    assert list(rows(browser)) == [invoice.id]

    browser.get("about:blank")
    browser.get(shared)  # the link, opened again: the same filters, the same runs
    assert list(rows(browser)) == [invoice.id]
    assert browser.find_element(By.NAME, "version").get_attribute("value") == "v2"
    browser.get(f"{ui}?key=invoice-&state=ready&kind=billing.invoice")
    assert list(rows(browser)) == [invoice.id]
    browser.get(f"{ui}?version=v1")
    assert rows(browser) == {}
    browser.get(f"{ui}?since=2026-01-01T00:00Z&state=dead")
    assert list(rows(browser)) == [runs.dead]
    browser.get(f"{ui}?since=last+tuesday")
    assert "unknown age 'last tuesday'" in text(browser, "main")
