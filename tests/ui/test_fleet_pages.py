"""The fleet's pages in a real headless browser, each reached from the
navigation: the workers page, showing a live worker with the runs it holds
(linked to their pages), one stopped cleanly, one gone after missed beats,
and a hostile record named as text, never run; the schedules page, showing
each schedule's last tick and the run it started (linked), its next tick and
its missed-tick policy.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from test_browser import click, never_ran_injected_script, text, texts
from ui_jobs import HOSTILE, Hold, Ship, Sync
from ui_kit import DEADLINE, SHOWN_BUCKET, serve, wait_for
from worker_records import put_record, record

from stepstone import JobRunner, Schedule, SubmitOptions
from stepstone.ops.schedules import ScheduleRow, read_schedules
from stepstone.testing import FakeClock, advance, wait_until

pytestmark = pytest.mark.slow

WORKERS = """return [...document.querySelectorAll("table.workers tbody tr")].map(
    (tr) => [...tr.cells].map((td) => td.innerText))"""
COLUMNS = ["worker", "state", "host", "pid", "held", "seen", "started", "runs"]


def workers(browser: Any) -> list[dict[str, str]]:
    """The workers table as the user sees it, row by row."""
    return [dict(zip(COLUMNS, row, strict=True)) for row in browser.execute_script(WORKERS)]


class WorkerThread:
    """A JobRunner's worker on its own event loop (the browser calls block
    the test's), holding one run of Hold, beating every ``beat`` seconds."""

    def __init__(self, store: str, worker_id: str, beat: float = 0.2) -> None:
        self.store, self.worker_id, self.beat = store, worker_id, beat
        self.held = ""
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        assert self._ready.wait(DEADLINE), "the worker did not start"

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        runner = JobRunner(
            self.store,
            jobs=[Hold],
            worker_id=self.worker_id,
            concurrency=2,
            worker_beat=self.beat,
            poll_interval=0.05,
            drain_timeout=0.0,
        )
        async with runner:
            handle = await runner.submit(Hold())
            await wait_until(lambda: bool(runner.worker.held_runs()), timeout=DEADLINE)
            self.held = handle.id
            self._ready.set()
            await self._stop.wait()
        await runner.close()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(DEADLINE)


async def test_the_workers_page_shows_a_live_worker_its_runs_and_its_clean_stop(
    tmp_path: Path, browser: Any
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    put_record(store, "w-dead", host="ip-10-0-1-9", beat=time.time() - 600)
    bad = put_record(store, "w-bad", host=HOSTILE[:200])
    worker = WorkerThread(str(store), "w-live")
    try:
        with serve(str(store), tmp_path) as ui:
            browser.get(ui)
            click(browser, "header nav a", "Workers")
            wait_for(lambda: browser.current_url == f"{ui}workers", "the workers page")
            assert browser.title == "Workers · stepstone"

            def live_holds() -> bool:
                rows = workers(browser)
                return bool(rows) and rows[0]["held"] == "1 / 2"

            wait_for(live_holds, "the live worker's beat holding its run")
            live, dead = workers(browser)
            assert (live["worker"], live["state"], live["pid"]) == (
                "w-live",
                "live",
                str(os.getpid()),
            )
            assert live["runs"].strip() == worker.held[:12]
            assert (dead["worker"], dead["state"], dead["host"]) == (
                "w-dead",
                "gone",
                "ip-10-0-1-9",
            )
            assert bad in text(browser, "section.unreadable")
            never_ran_injected_script(browser)

            click(browser, "td.held a", worker.held[:12])
            wait_for(lambda: browser.current_url.endswith(f"/runs/{worker.held}"), "the run")
            assert "orders.hold" in text(browser, "main")

            worker.stop()
            browser.get(f"{ui}workers")
            wait_for(
                lambda: [row["state"] for row in workers(browser)] == ["gone", "stopped"],
                "the stopped worker",
            )
            stopped = workers(browser)[1]
            assert stopped["held"] == "0 / 2" and stopped["seen"].startswith("stopped")
    finally:
        worker.stop()


@pytest.mark.parametrize("store_url", ["s3"], indirect=True)  # a store name, not a path
async def test_a_fleet_on_the_workers_page(store_url: str, tmp_path: Path, browser: Any) -> None:
    """A fleet as an operator sees it, for the screenshot: three live workers
    holding runs, one gone, one stopped."""
    runner = JobRunner(store_url)
    later = SubmitOptions(run_at=datetime.now(UTC) + timedelta(hours=1))
    held = [(await runner.submit(Ship(order=f"o-{n}"), later)).id for n in range(7)]
    now = time.time()
    records = [
        ("web-1", dict(host="ip-10-0-1-17", pid=811, held=3, runs=held[:3], beat=now - 4)),
        ("web-2", dict(host="ip-10-0-1-23", pid=790, held=2, runs=held[3:5], beat=now - 21)),
        ("batch-1", dict(host="ip-10-0-2-5", pid=1207, concurrency=64, held=2, runs=held[5:])),
        ("web-3", dict(host="ip-10-0-1-31", pid=802, beat=now - 640)),
        ("batch-0", dict(host="ip-10-0-2-4", pid=1193, beat=now - 3000, stopped=now - 3000)),
    ]
    for worker_id, changes in records:
        await runner.store.put(*record(worker_id, **changes))
    await runner.close()
    with serve(store_url, tmp_path) as ui:
        browser.get(f"{ui}workers")
        assert text(browser, "header .store") == f"s3://{SHOWN_BUCKET}/prod"
        shown = workers(browser)
        assert [(row["worker"], row["state"]) for row in shown] == [
            ("batch-1", "live"),
            ("web-1", "live"),
            ("web-2", "live"),
            ("web-3", "gone"),
            ("batch-0", "stopped"),
        ]
        assert texts(browser, "td.held a")[:2] == [held[5][:12], held[6][:12]]
        screenshot = tmp_path / "ui-workers.png"
        assert browser.save_screenshot(str(screenshot))


@pytest.mark.parametrize("store_url", ["s3"], indirect=True)  # a store name, not a path
async def test_the_schedules_page_shows_each_schedule_its_last_run_and_next_tick(
    store_url: str, tmp_path: Path, browser: Any
) -> None:
    """Schedules run by a worker on a fake clock up to twenty minutes ago,
    then left: the page, with no application code, shows each from its
    marker, the run its last tick started (linked), and its next tick,
    overdue where nobody submitted it."""
    real_now = time.time()
    start = real_now - 50 * 60
    clock = FakeClock(start)
    # The nightly report's tick is six hours from now in Paris, never within
    # the fifty minutes the worker runs, whatever the hour the suite runs at.
    nightly = (
        f"30 {datetime.fromtimestamp(real_now + 6 * 3600, ZoneInfo('Europe/Paris')).hour} * * *"
    )
    schedules = [
        Schedule("sync-inventory", every=timedelta(minutes=15), job=_sync),
        Schedule("expire-carts", cron="*/10 * * * *", job=_sync, missed="skip"),
        Schedule("nightly-report", cron=nightly, timezone="Europe/Paris", job=_sync, missed="all"),
    ]
    runner = JobRunner(store_url, jobs=[Sync], schedules=schedules, clock=clock, poll_interval=0.05)
    async with runner:
        await wait_until(lambda: _markers(runner, 3), timeout=DEADLINE)
        while clock.now() < real_now - 20 * 60:
            await advance(clock, 300)
            last_sync = (clock.now() // 900) * 900
            if last_sync > start:  # a tick since the schedule was first seen
                await wait_until(lambda t=last_sync: _ran(runner, t), timeout=DEADLINE)
        sync = await _row(runner, "sync-inventory")
    await runner.close()
    assert sync.last_run is not None
    with serve(store_url, tmp_path) as ui:
        browser.get(ui)
        click(browser, "header nav a", "Schedules")
        wait_for(lambda: browser.current_url == f"{ui}schedules", "the schedules page")
        rows = {row[0]: row for row in browser.execute_script(SCHEDULES)}
        assert sorted(rows) == ["expire-carts", "nightly-report", "sync-inventory"]
        assert rows["expire-carts"][1:3] == ["cron */10 * * * * (UTC)", "skip"]
        _, spec, missed, overlap, _, run, next_tick, state = rows["sync-inventory"]
        assert (overlap, state) == ("allow_all", "active")
        assert (spec, missed) == ("every 0:15:00", "latest")
        assert run == f"{sync.last_run[:12]} succeeded"
        assert next_tick.endswith("overdue")
        assert rows["nightly-report"][1:3] == [f"cron {nightly} (Europe/Paris)", "all"]
        # First seen, and no tick of it since: none yet.
        assert rows["nightly-report"][4].startswith("none yet (carried since ")
        assert rows["nightly-report"][5] == "none"
        screenshot = tmp_path / "ui-schedules.png"
        assert browser.save_screenshot(str(screenshot))
        click(browser, "td.run a", sync.last_run[:12])
        wait_for(lambda: browser.current_url.endswith(f"/runs/{sync.last_run}"), "its run")
        assert "inventory.sync" in text(browser, "main")


SCHEDULES = """return [...document.querySelectorAll("table.schedules tbody tr")].map(
    (tr) => [...tr.cells].map((td) => td.innerText.trim()))"""


def _sync(tick: datetime) -> Sync:
    return Sync(at=tick.isoformat())


async def _markers(runner: JobRunner, count: int) -> bool:
    return len((await read_schedules(runner, [])).rows) == count


async def _row(runner: JobRunner, name: str) -> ScheduleRow:
    return next(row for row in (await read_schedules(runner, [])).rows if row.name == name)


async def _ran(runner: JobRunner, tick: float) -> bool:
    """sync-inventory's marker is at ``tick`` or later, and its run has ended."""
    row = await _row(runner, "sync-inventory")
    return row.last_tick is not None and row.last_tick >= tick and row.run_state == "succeeded"
