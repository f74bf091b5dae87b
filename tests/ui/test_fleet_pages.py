"""The fleet's pages in a real headless browser: the workers page, reached
from the navigation, showing a live worker with the runs it holds (linked to
their pages), one stopped cleanly, one gone after missed beats, and a
hostile record named as text, never run.

The screenshot docs/operations.md shows is taken here
(``STEPSTONE_UPDATE_SCREENSHOTS=1`` writes docs/img/ui-workers.png).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import DEADLINE, SHOWN_BUCKET, serve, wait_for
from test_browser import DOCS_IMG, click, never_ran_injected_script, text, texts
from ui_jobs import HOSTILE, Hold, Ship
from worker_records import put_record, record

from stepstone import JobRunner, SubmitOptions
from stepstone.testing import wait_until

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
        if os.environ.get("STEPSTONE_UPDATE_SCREENSHOTS"):
            shutil.copyfile(screenshot, DOCS_IMG / "ui-workers.png")
