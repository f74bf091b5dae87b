"""A debounced run's page in a real headless browser: it says the run is
debounced, until when and after how many submits, and shows the debounce
key as text; a run skipped for its singleton key's live run says which."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from test_browser import never_ran_injected_script, text
from ui_jobs import HOSTILE, Ship
from ui_kit import DEADLINE, serve, wait_for

from stepstone import Debounce, Job, JobContext, JobRunner, JobStatus, Singleton, SubmitOptions
from stepstone.testing import wait_until


@pytest.fixture
async def debounced_run(store_url: str) -> str:
    runner = JobRunner(store_url, jobs=[Ship], poll_interval=0.05)
    options = SubmitOptions(debounce=Debounce(HOSTILE, wait=600))
    async with runner:
        handles = [await runner.submit(Ship(order=f"o-{n}"), options) for n in range(4)]

        async def debounced() -> bool:
            state = await runner.status(handles[0].id)
            return state is not None and state.status is JobStatus.DEBOUNCED

        await wait_until(debounced, timeout=DEADLINE)
    await runner.close()
    return handles[0].id


@pytest.fixture
def viewer(store_url: str, tmp_path: Path, debounced_run: str) -> Iterator[str]:
    with serve(store_url, tmp_path) as url:
        yield url


async def test_a_debounced_runs_page_says_until_when_and_after_how_many_submits(
    debounced_run: str, viewer: str, browser: Any
) -> None:
    browser.get(f"{viewer}runs/{debounced_run}")
    wait_for(lambda: "debounced" in text(browser, "h1"), "the run's status")
    shown = text(browser, "#debounced")
    assert shown.startswith("until ") and "4 submits" in shown
    queue = browser.find_element("css selector", "#queue").text
    assert "<script>window.__pwned = 1" in queue and "\\x1b[2J" in queue  # (as text)
    never_ran_injected_script(browser)


class Nightly(Job[str]):
    """A singleton per report that sleeps long: live while the page is read."""

    NAME: ClassVar[str] = "ui.nightly"
    singleton: ClassVar[Singleton] = Singleton.SKIP_NEWEST
    report: str

    def concurrency_key(self) -> str:
        return self.report

    async def run(self, ctx: JobContext) -> str:
        await ctx.sleep(600)
        return "done"


async def test_a_skipped_runs_page_names_the_live_run_it_was_skipped_for(
    store_url: str, tmp_path: Path, browser: Any
) -> None:
    runner = JobRunner(store_url, jobs=[Nightly], poll_interval=0.05)
    async with runner:
        live = await runner.submit(Nightly(report="sales"))
        skipped = await runner.submit(Nightly(report="sales"))
        assert (await skipped.join(timeout=DEADLINE)).status is JobStatus.CANCELLED
    await runner.close()
    with serve(store_url, tmp_path) as viewer:
        browser.get(f"{viewer}runs/{skipped.id}")
        wait_for(lambda: "cancelled" in text(browser, "h1"), "the run's status")
        assert f"skipped: run {live.id} of its singleton key 'sales' was live" in text(
            browser, "dd.error-message"
        )
