"""The schedules page's buttons, in a real headless browser: an operator
pauses a schedule with a note, confirmed on a page naming what it will do,
and the page shows it paused, by whom and why; resumed the same way. The
pause is in the store (what every worker reads), and in the audit log. A
POST without the view's token changes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from test_actions import confirm, fill, post
from test_browser import click, text, texts
from ui_jobs import Ship
from ui_kit import DEADLINE, serve, wait_for

from stepstone import JobRunner, Schedule
from stepstone.records.schedule_marker import Marker
from stepstone.testing import wait_until

SYNC = Schedule("sync", every=timedelta(minutes=15), job=lambda tick: Ship(order="sync"))


@pytest.fixture
async def carried(store_url: str) -> AsyncIterator[str]:
    """A store where a worker carried schedule ``sync`` (its marker is there)."""
    async with JobRunner(store_url, jobs=[Ship], schedules=[SYNC]):
        await wait_until(lambda: _carried(store_url), timeout=DEADLINE)
    yield store_url


async def _carried(store: str) -> bool:
    return await _marker(store) is not None


async def _marker(store: str) -> Marker | None:
    runner = JobRunner(store)
    try:
        return await runner.scheduler.marker("sync")
    finally:
        await runner.close()


async def test_an_operator_pauses_and_resumes_a_schedule_from_its_page(
    carried: str, tmp_path: Path, browser: Any
) -> None:
    with serve(carried, tmp_path, "--allow-actions") as view_url:
        browser.get(f"{view_url}schedules")
        wait_for(lambda: texts(browser, "td.state") != [], "the schedules table")
        assert text(browser, "td.state").startswith("active")
        fill(browser, "form.pause", {"note": "the warehouse counts stock"})
        click(browser, "form.pause button", "Pause…")
        confirm(browser, "Pause schedule 'sync' with the note 'the warehouse counts stock'?")
        assert browser.current_url.startswith(f"{view_url}schedules?result=")
        assert text(browser, "section.result").startswith("paused schedule 'sync'")
        state = text(browser, "td.state")
        assert state.startswith("paused since ") and "the warehouse counts stock" in state
        assert "anonymous" in state  # who: no sign-in on this machine
        marker = await _marker(carried)
        assert marker is not None and marker.paused and marker.note == "the warehouse counts stock"

        click(browser, "td.state a", "Resume…")
        confirm(browser, "Resume schedule 'sync'?")
        assert text(browser, "section.result").startswith("resumed schedule 'sync'")
        assert text(browser, "td.state").startswith("active")
        marker = await _marker(carried)
        assert marker is not None and not marker.paused

        browser.get(f"{view_url}audit")
        shown = [row.split() for row in texts(browser, "tbody tr")]
        assert any("pause" in row and "done" in row for row in shown), shown
        assert any("resume" in row and "done" in row for row in shown), shown


async def test_a_pause_posted_without_the_views_token_changes_nothing(
    carried: str, tmp_path: Path
) -> None:
    with serve(carried, tmp_path, "--allow-actions") as view_url:
        status, page = post(f"{view_url}act/pause", {"schedule": "sync", "note": "x"})
        assert status == 403 and "did not carry this view&#39;s token" in page
        shown, page = post(f"{view_url}act/pause?schedule=sync", None)
        assert shown == 200 and "Pause schedule" in page  # a confirmation changes nothing
        missing, page = post(f"{view_url}act/pause?schedule=nope", None)
        assert missing == 400 and "no schedule" in page
    marker = await _marker(carried)
    assert marker is not None and not marker.paused


async def test_the_page_says_why_a_tick_was_skipped_and_what_waits(
    carried: str, tmp_path: Path
) -> None:
    runner = JobRunner(carried)
    try:
        marker = await runner.scheduler.marker("sync")
        assert marker is not None
        waiting = replace(
            marker,
            skipped_tick=marker.tick,
            skipped_why="overlap buffer_one: the run started last was still live",
            buffered=(marker.tick,),
        )
        await runner.store.put(runner.layout.schedule("sync"), waiting.encode())
    finally:
        await runner.close()
    with serve(carried, tmp_path) as view:
        status, page = post(f"{view}schedules", None)
    assert status == 200
    assert "1 tick(s) wait for its live run to end" in page
    assert "overlap buffer_one: the run started last was still live" in page
