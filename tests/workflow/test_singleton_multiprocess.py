"""Singleton keys across processes, with the worker running the live run
SIGKILLed: two worker processes on one store (a directory, and S3 on moto),
the submits from a third. Run A of a key starts and kills its worker (on
its first start); while A's worker is dead, B is submitted under the same
key. Per policy:

- ``skip``: B joins A; A is taken over once its lease lapses and finishes;
  both handles answer A's result; no run of B's input ever starts.
- ``skip_newest``: B is recorded cancelled at once, naming A; A finishes.
- ``cancel_running``: A is cancelled (its handle raises JobCancelled, it
  never starts again); B starts only once A's slot lapsed (a lease after
  A's), and runs.
- ``queue``: B waits; A is taken over and finishes; then B runs.

Each run's starts and ends, from both workers, go to one file; no two runs
of the key ever run at once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from singleton_jobs import LOG_SETTING, CancelSync, NewestSync, SkipSync, Sync

from stepstone import JobCancelled, JobRunner, JobStatus
from stepstone.testing import wait_until

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
LEASE = 4.0
"""Long enough that a loaded machine does not lapse a live worker's lease."""
DEADLINE = 90.0


@pytest.fixture(params=["file", "s3"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "s3":
        url: str = request.getfixturevalue("s3_url")
        return url
    root = tmp_path / "store"
    root.mkdir()
    return str(root)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "runs.log"


@pytest.fixture
def workers(store_url: str, log: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    env = {**os.environ, LOG_SETTING: str(log)}
    command = [sys.executable, str(HERE / "flow_worker.py"), store_url, str(LEASE)]
    fleet = [subprocess.Popen(command, env=env, cwd=HERE) for _ in range(2)]
    yield fleet
    for worker in fleet:
        if worker.poll() is None:
            worker.terminate()
    for worker in fleet:
        worker.wait(30)


@contextlib.asynccontextmanager
async def submitting(store_url: str) -> AsyncIterator[JobRunner]:
    """A runner that submits and awaits, running no worker (the workers do)."""
    api = JobRunner(store_url, poll_interval=0.05)
    try:
        yield api
    finally:
        await api.close()


def lines(log: Path) -> list[tuple[str, str, int, int, float]]:
    """(what, run, n, pid, at) for each start, end or stop, in order."""
    if not log.exists():
        return []
    found = []
    for line in log.read_text().splitlines():
        what, run, n, pid, at = line.split()
        found.append((what, run, int(n), int(pid), float(at)))
    return found


def starts(log: Path, n: int) -> list[float]:
    return [at for what, _, m, _, at in lines(log) if what == "start" and m == n]


def never_two_at_once(log: Path, killed: set[int]) -> None:
    """Runs' intervals (start to end or stop; a start in a killed process to
    the next start) never overlap: one run of the key at a time. (A run
    started again is its own takeover, not another run.)"""
    open_run: tuple[int, int] | None = None  # (n, pid)
    for what, _, n, pid, _ in lines(log):
        if what == "start":
            assert open_run is None or open_run[1] in killed or open_run[0] == n, (
                f"{n} started while {open_run} ran"
            )
            open_run = (n, pid)
        elif open_run is not None and (n, pid) == open_run:
            open_run = None


async def submit_a_and_kill_its_worker(
    api: JobRunner, job_type: type[Sync], log: Path, workers: list[subprocess.Popen[bytes]]
) -> tuple[object, int]:
    """Submit run A (which SIGKILLs the worker of its first start); wait
    until it did; the killed worker's pid."""
    a = await api.submit(job_type(n=0, hold=1.0, die=True))
    await wait_until(lambda: bool(starts(log, 0)), timeout=DEADLINE)
    pid = next(p for what, _, n, p, _ in lines(log) if what == "start" and n == 0)
    dead = next(w for w in workers if w.pid == pid)
    await asyncio.to_thread(dead.wait, DEADLINE)
    assert dead.returncode == -9
    return a, pid


@pytest.mark.usefixtures("workers")
async def test_skip_joins_the_live_run_across_a_sigkill(
    store_url: str, log: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    async with submitting(store_url) as api:
        a, killed = await submit_a_and_kill_its_worker(api, SkipSync, log, workers)
        b = await api.submit(SkipSync(n=1))
        assert b.id == a.id  # type: ignore[attr-defined]
        assert await b.result(timeout=DEADLINE) == "ran 0"
        after = await api.submit(SkipSync(n=2))
        assert after.id != a.id  # type: ignore[attr-defined]
        assert await after.result(timeout=DEADLINE) == "ran 2"
    assert len(starts(log, 0)) >= 2 and starts(log, 1) == []  # killed, then taken over
    never_two_at_once(log, {killed})


@pytest.mark.usefixtures("workers")
async def test_skip_newest_records_the_newest_cancelled_across_a_sigkill(
    store_url: str, log: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    async with submitting(store_url) as api:
        a, killed = await submit_a_and_kill_its_worker(api, NewestSync, log, workers)
        b = await api.submit(NewestSync(n=1))
        skipped = await b.join(timeout=1)
        assert skipped.status is JobStatus.CANCELLED and skipped.error is not None
        assert f"skipped: run {a.id}" in skipped.error.message  # type: ignore[attr-defined]
        assert await a.result(timeout=DEADLINE) == "ran 0"  # type: ignore[attr-defined]
    assert starts(log, 1) == []
    never_two_at_once(log, {killed})


@pytest.mark.usefixtures("workers")
async def test_cancel_running_cancels_the_live_run_and_starts_after_its_slot_across_a_sigkill(
    store_url: str, log: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    async with submitting(store_url) as api:
        a, killed = await submit_a_and_kill_its_worker(api, CancelSync, log, workers)
        b = await api.submit(CancelSync(n=1))
        with pytest.raises(JobCancelled):
            await a.result(timeout=DEADLINE)  # type: ignore[attr-defined]
        assert await b.result(timeout=DEADLINE) == "ran 1"
    (killed_start,) = starts(log, 0)  # never taken over: it was cancelled
    (b_start,) = starts(log, 1)
    # The dead run's slot held the key until a lease after its lease lapsed.
    assert b_start - killed_start >= LEASE - 0.5
    never_two_at_once(log, {killed})


@pytest.mark.usefixtures("workers")
async def test_queue_runs_the_next_once_the_live_run_finished_across_a_sigkill(
    store_url: str, log: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    async with submitting(store_url) as api:
        a, killed = await submit_a_and_kill_its_worker(api, Sync, log, workers)
        b = await api.submit(Sync(n=1))
        assert b.id != a.id  # type: ignore[attr-defined]
        assert await a.result(timeout=DEADLINE) == "ran 0"  # type: ignore[attr-defined]
        assert await b.result(timeout=DEADLINE) == "ran 1"
    assert len(starts(log, 0)) >= 2  # killed, then taken over
    a_end = next(at for what, _, n, _, at in lines(log) if what == "end" and n == 0)
    assert starts(log, 1)[0] >= a_end
    never_two_at_once(log, {killed})
