"""``stepstone ui`` in a real headless browser: what a user sees on the runs
list and a run's page, filters, live refresh, and job text that tries to
inject script shown as text and never run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select
from ui_jobs import HOSTILE, Ship
from ui_kit import DEADLINE, SHOWN_BUCKET, Runs, wait_for

from stepstone import JobRunner

# The page replaces its <main> twice a second (live refresh): each look at it
# reads what it needs in one script, so no element goes stale halfway.

ROWS = """return [...document.querySelectorAll("table.runs tbody tr")].map(
    (tr) => [tr.dataset.id, ...[...tr.cells].map((td) => td.innerText)])"""


def rows(browser: Any) -> dict[str, dict[str, str]]:
    """The runs table as the user sees it: run id -> column -> text."""
    columns = ["run", "state", "type", "attempts", "submitted", "error"]
    return {
        row[0]: dict(zip(columns, row[1:], strict=True)) for row in browser.execute_script(ROWS)
    }


def text(browser: Any, selector: str) -> str:
    """What the user sees of the first element ``selector`` finds."""
    found: str = browser.execute_script(
        "return document.querySelector(arguments[0]).innerText", selector
    )
    return found


def texts(browser: Any, selector: str) -> list[str]:
    found: list[str] = browser.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((e) => e.innerText)", selector
    )
    return found


def click(browser: Any, selector: str, link_text: str | None = None) -> None:
    """Click what ``selector`` finds (the link reading ``link_text``, if given)
    as the user would, found and clicked in one script: the live refresh can
    replace an element between a lookup and a click made apart."""
    clicked = browser.execute_script(
        """const found = [...document.querySelectorAll(arguments[0])].find(
            (e) => arguments[1] === null || e.innerText === arguments[1]);
        if (found) { found.click(); return true; } return false;""",
        selector,
        link_text,
    )
    assert clicked, f"nothing to click: {selector} {link_text or ''}"


def screenshot_of(browser: Any, selector: str, path: Path) -> None:
    """A PNG of the element ``selector`` at ``path``; the page's refresh may
    replace the element while it is taken, so it is looked up again then."""
    from selenium.common.exceptions import StaleElementReferenceException

    deadline = time.monotonic() + DEADLINE
    while True:
        try:
            assert browser.find_element(By.CSS_SELECTOR, selector).screenshot(str(path))
            return
        except StaleElementReferenceException:
            if time.monotonic() > deadline:
                raise


def never_ran_injected_script(browser: Any) -> None:
    assert browser.execute_script("return window.__pwned") is None
    assert "PWNED" not in browser.title
    assert browser.execute_script("return document.querySelectorAll('main script, main img')") == []


@pytest.mark.slow
@pytest.mark.parametrize("store_url", ["s3"], indirect=True)  # a store name, not a path
async def test_the_runs_list_shows_each_run_newest_first_and_filters(
    runs: Runs, ui: str, browser: Any, tmp_path: Path
) -> None:
    browser.get(ui)
    assert browser.title == "Runs · stepstone"
    assert text(browser, "header .store") == f"s3://{SHOWN_BUCKET}/prod"
    listed = rows(browser)
    assert {run: row["state"] for run, row in listed.items()} == {
        runs.succeeded: "succeeded",
        runs.dead: "dead",
        runs.scheduled: "scheduled",
        runs.sleeping: "sleeping",
    }
    assert listed[runs.succeeded]["type"] == "orders.ship"
    assert listed[runs.succeeded]["run"] == runs.succeeded[:12]
    # Newest first by when each was submitted (stepstone ls's order).
    assert list(listed) == [runs.sleeping, runs.dead, runs.succeeded, runs.scheduled]

    # The hostile error is there as the text it is: markup shown, escapes made visible.
    error = listed[runs.dead]["error"]
    assert '<script>window.__pwned = 1; document.title = "PWNED"</script>' in error
    assert "\\x1b[2J\\x1b[31mred alert\\u202e" in error
    never_ran_injected_script(browser)

    counts = text(browser, "section.counts")
    for expected in ("1 dead", "1 scheduled", "1 sleeping", "0 running"):
        assert expected in counts.replace("\n", " "), counts

    screenshot = tmp_path / "ui-runs.png"
    assert browser.save_screenshot(str(screenshot))
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # Filters: by state, then by job type, through the form as a user would.
    Select(browser.find_element(By.NAME, "state")).select_by_visible_text("dead")
    click(browser, "form.filters button")
    wait_for(lambda: "state=dead" in browser.current_url, "the state filter")
    assert list(rows(browser)) == [runs.dead]
    never_ran_injected_script(browser)

    browser.get(f"{ui}?kind=orders.ship")
    assert set(rows(browser)) == {runs.succeeded, runs.scheduled}
    browser.get(f"{ui}?since=15m&state=succeeded")
    assert list(rows(browser)) == [runs.succeeded]


async def test_a_runs_page_shows_input_steps_in_order_attempts_and_outcome(
    runs: Runs, ui: str, browser: Any
) -> None:
    browser.get(ui)
    click(browser, "a", runs.succeeded[:12])
    wait_for(lambda: runs.succeeded in browser.current_url, "the run's page")
    heading = text(browser, "h1")
    assert heading.startswith("orders.ship") and heading.endswith("succeeded")
    assert "o-1" in text(browser, "#input")  # a finished run keeps its input in its outcome
    assert texts(browser, "table.steps tr.step td.name") == ["pack", "label", "send"]
    for took in texts(browser, "table.steps tr.step td:nth-child(4)"):
        assert took.endswith(("ms", " s")), took
    outcome = text(browser, "#outcome")
    assert "succeeded after 1 attempt(s)" in outcome and "sent label-o-1" in outcome
    assert "Attempt 1: succeeded" in text(browser, "#attempts")
    assert '"done": 2' in text(browser, "dl.summary")

    browser.get(f"{ui}runs/{runs.dead}")
    never_ran_injected_script(browser)
    outcome = text(browser, "#outcome")
    assert "permanent: Permanent: <script>window.__pwned = 1;" in outcome
    assert "stepstone.runtime.errors.Permanent" in outcome
    memo = text(browser, "table.steps tr.step pre")
    assert memo == HOSTILE.replace("\x1b", "\\x1b").replace("\u202e", "\\u202e")
    assert "Attempt 1: dead" in text(browser, "#attempts")
    assert "dead" in text(browser, "#queue")

    browser.get(f"{ui}runs/{runs.scheduled}")
    assert '"order": "later"' in text(browser, "#input")
    assert "Run at" in text(browser, "#queue")

    browser.get(f"{ui}runs/{runs.sleeping}")
    queue = text(browser, "#queue")
    assert "sleeping" in queue and "Wakes at" in queue

    browser.get(f"{ui}runs/{'0' * 32}")
    assert "No run" in text(browser, "h1")


async def test_pages_refresh_live_without_reloading(runs: Runs, ui: str, browser: Any) -> None:
    browser.get(ui)
    browser.execute_script("window.__same_page = true")
    runner: JobRunner = runs.runner()  # submits only: nothing runs the new job
    try:
        fresh = await runner.submit(Ship(order="o-2"))
    finally:
        await runner.close()
    wait_for(lambda: fresh.id in rows(browser), "the new run to appear")
    assert rows(browser)[fresh.id]["state"] == "ready"
    assert "1 ready" in text(browser, "section.counts").replace("\n", " ")
    assert browser.execute_script("return window.__same_page") is True
