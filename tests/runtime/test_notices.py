"""An idle worker on a local store (a directory, a SQLite file) hears of
another process's job as it is created (inotify), instead of at its next
listing: the stores' notices (stepstone.store.file.notices,
stepstone.store.sqlite.notices) and the StoreQueue's use of them.

Listings are made rare here (an hour apart), so a job found at all was
found by its notice. The notices come from the kernel, so a second
StoreQueue on the store in this process stands for another process, as in
the contract suite; tests/reliability/test_restart_reclaim.py and
benchmarks/pickup.py use real worker processes.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from stepstone.runtime import Attempt
from stepstone.runtime.store_queue import StoreQueue
from stepstone.runtime.worker import Worker
from stepstone.store import FileStore, SqliteStore
from stepstone.store.base import ChangeNotices, ObjectStore
from stepstone.store.counting import CountingStore
from stepstone.testing import wait_until

pytestmark = pytest.mark.skipif(
    sys.platform != "linux",
    reason=(
        "local stores' notices use inotify, which only Linux has; elsewhere a worker finds "
        "new jobs by listing, which the rest of the suite tests"
    ),
)

RARELY = 3600.0
"""Seconds between listings: longer than any test waits."""


async def until(condition: Callable[[], object], what: str, deadline: float = 20.0) -> None:
    await wait_until(condition, timeout=deadline, interval=0.01, message=what)


@pytest.fixture(params=["file", "sqlite"])
def local(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Where a local store lives: a directory, or a SQLite file in one."""
    return tmp_path if request.param == "file" else tmp_path / "jobs.db"


def open_local(path: Path) -> FileStore | SqliteStore:
    return SqliteStore(path) if path.suffix == ".db" else FileStore(path)


def script_command(path: Path, *lines: str) -> list[str]:
    """The command that runs ``lines`` in another process, in an async
    function holding the local store at ``path`` as ``store``."""
    body = "".join(f"    {line}\n" for line in lines)
    kind = "SqliteStore" if path.suffix == ".db" else "FileStore"
    script = (
        "import asyncio, sys\n"
        f"from stepstone.store import {kind}\n"
        "async def main():\n"
        f"    store = {kind}(sys.argv[1])\n"
        f"{body}"
        "    await store.close()\n"
        "asyncio.run(main())\n"
    )
    return [sys.executable, "-c", script, str(path)]


async def run_script(path: Path, *lines: str) -> None:
    """Run :func:`script_command` and wait for it without holding the loop."""
    await asyncio.to_thread(subprocess.run, script_command(path, *lines), check=True)


async def test_a_local_store_tells_of_objects_placed_by_another_process(local: Path) -> None:
    store = open_local(local)
    assert isinstance(store, ChangeNotices)
    heard: list[str | None] = []
    stop = store.watch_changes("queue/jobs/", heard.append)
    assert stop is not None
    try:
        # Two processes one after another: the kernel folds a notice into the
        # one before it while that one is unread (inotify(7)): a create and
        # a swap of one name heard after both landed are one notice.
        await run_script(local, "await store.put('queue/jobs/a', b'1')")
        await until(lambda: "queue/jobs/a" in heard, "the notice of the create")
        await run_script(
            local,
            "found = await store.get('queue/jobs/a')",
            "await store.put_if_match('queue/jobs/a', b'2', found.etag)",
            "await store.put('queue/other/b', b'1')",
            "await store.put('queue/jobs/c', b'1')",
        )
        await until(lambda: "queue/jobs/c" in heard, "the notice of the last object")
        # The create and the swap of a, then c; nothing of another prefix.
        assert heard == ["queue/jobs/a", "queue/jobs/a", "queue/jobs/c"]
    finally:
        stop()
    await store.close()


async def test_a_watch_hears_what_is_placed_as_it_starts(local: Path) -> None:
    """Notices begin when the watch is asked for: an object another process
    places right after, before the watch's first look could run (this test
    holds the event loop while it does), is heard."""
    store = open_local(local)
    heard: list[str | None] = []
    stop = store.watch_changes("queue/jobs/", heard.append)
    assert stop is not None
    try:
        # Blocking on purpose: the watch's first look cannot run meanwhile.
        command = script_command(local, "await store.put('queue/jobs/early', b'1')")
        subprocess.run(command, check=True)  # noqa: ASYNC221
        await until(lambda: "queue/jobs/early" in heard, "the notice of the early object")
    finally:
        stop()
    await store.close()


@pytest.mark.parametrize("counted", [False, True], ids=["bare", "counted"])
async def test_a_listening_queue_reads_a_new_record_it_was_told_of_without_listing(
    local: Path, counted: bool
) -> None:
    """Also through a CountingStore, as the fleet tests and benchmarks count
    a store: wrapped, it still finds work as the bare store would."""
    store = open_local(local)
    submitter = StoreQueue(store)
    watched: ObjectStore = CountingStore(store) if counted else store
    worker_side = StoreQueue(watched, scan_interval=RARELY, idle_scan_max=RARELY)
    told: list[None] = []
    unsubscribe = worker_side.subscribe(lambda: told.append(None))
    try:
        assert await worker_side.claim(1, lease=10) == []  # the first claim lists
        assert worker_side.stats.scans == 1
        await submitter.enqueue(b"x", kind="k", id="new-job")
        await until(lambda: told, "the listener to hear of the new record")
        [delivery] = await worker_side.claim(1, lease=10)
        assert delivery.id == "new-job"
        assert worker_side.stats.scans == 1  # read as told, not listed
        assert worker_side.stats.fetches == 1
    finally:
        unsubscribe()
    # Nobody listens: no notices are heard, and the next job waits for a
    # listing. (Another queue on the store, listening, hears of the job:
    # by then this one would have, had it still listened.)
    witness = StoreQueue(store, scan_interval=RARELY, idle_scan_max=RARELY)
    heard: list[None] = []
    stop_witness = witness.subscribe(lambda: heard.append(None))
    try:
        await submitter.enqueue(b"y", kind="k", id="later-job")
        await until(lambda: heard, "the witness to hear of the new record")
    finally:
        stop_witness()
    assert await worker_side.claim(1, lease=10) == []
    await witness.close()
    await worker_side.close()
    await store.close()


async def test_an_idle_worker_starts_another_process_job_without_waiting_for_a_listing(
    local: Path,
) -> None:
    store = open_local(local)
    submitter = StoreQueue(store)
    queue = StoreQueue(store, scan_interval=RARELY, idle_scan_max=RARELY)
    ran: list[str] = []

    async def handler(attempt: Attempt) -> None:
        ran.append(attempt.run_id)

    worker = Worker(queue, poll_interval=RARELY, worker_id="notices-test")
    worker.register("k", handler)
    async with worker:
        await until(lambda: queue.stats.scans >= 1, "the worker's first listing")
        for n in range(3):
            await submitter.enqueue(b"x", kind="k", id=f"job-{n}")
            await until(lambda n=n: len(ran) == n + 1, f"job {n} to run")
    assert ran == ["job-0", "job-1", "job-2"]
    assert queue.stats.scans <= 2  # found by notices (and the reclaim's look at the start)
    await store.close()
