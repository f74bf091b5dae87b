"""The runs list's filter by attributes, in a real headless browser: the
field takes ``name=value`` (several separated by commas), the runs listed are
those with every one, the filter lives in the URL, and a bad name is said."""

from __future__ import annotations

from typing import Any

from selenium.webdriver.common.by import By
from test_browser import click, rows, text
from ui_jobs import Invoice
from ui_kit import Runs, wait_for

from stepstone import JobRunner, SubmitOptions


async def test_the_list_filters_runs_by_their_attributes(runs: Runs, ui: str, browser: Any) -> None:
    runner = JobRunner(runs.store, jobs=[Invoice])  # submits only
    try:
        acme_pro = await runner.submit(
            Invoice(number=1), SubmitOptions(attributes={"tenant": "acme", "plan": "pro"})
        )
        acme_free = await runner.submit(
            Invoice(number=2), SubmitOptions(attributes={"tenant": "acme", "plan": "free"})
        )
        await runner.submit(Invoice(number=3), SubmitOptions(attributes={"tenant": "beta"}))
    finally:
        await runner.close()
    browser.get(ui)
    browser.find_element(By.NAME, "attr").send_keys("tenant=acme")
    browser.find_element(By.CSS_SELECTOR, "form.filters button").click()
    wait_for(lambda: "attr=tenant%3Dacme" in browser.current_url, "the filter in the URL")
    assert set(rows(browser)) == {acme_pro.id, acme_free.id}
    assert browser.find_element(By.NAME, "attr").get_attribute("value") == "tenant=acme"

    browser.get(f"{ui}?attr=tenant%3Dacme%2C+plan%3Dpro")
    assert list(rows(browser)) == [acme_pro.id]
    # A run's page shows its attributes, each a link to the runs that have it.
    browser.get(f"{ui}runs/{acme_pro.id}")
    assert "plan=pro tenant=acme" in text(browser, "dd.attributes")
    click(browser, "dd.attributes a", "plan=pro")  # (the page's refresh may replace the link)
    wait_for(lambda: "attr=plan%3Dpro" in browser.current_url, "the runs with plan=pro")
    assert list(rows(browser)) == [acme_pro.id]
    browser.get(f"{ui}?attr=tenant%3Dacme&state=succeeded")
    assert rows(browser) == {}
    browser.get(f"{ui}?attr=tenant%3Dnobody")
    assert rows(browser) == {}
    browser.get(f"{ui}?attr=ten+ant%3Dacme")
    assert "attribute name 'ten ant' is not allowed" in text(browser, "main")
    browser.get(f"{ui}?attr=tenant")
    assert "expected NAME=VALUE" in text(browser, "main")
