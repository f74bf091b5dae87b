"""A concurrency key across real processes: two workers on one store (a
directory, and S3 on moto), twenty runs of one key with limit 1. Each run
appends its start and end to a shared file; no two intervals may overlap.
A holder SIGKILLed mid-run keeps the key until its lease lapses, and not
longer: the runs behind it all finish."""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from limit_jobs import Serial

from stepstone import JobRunner

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
RUNS = 20
LEASE = 3.0


@dataclass
class Interval:
    n: int
    start_number: int
    pid: int
    start: float
    end: float | None = None


def intervals(log: Path) -> list[Interval]:
    """Every start of a run, with its end if it ended, by start time."""
    found: dict[tuple[int, int], Interval] = {}
    for line in log.read_text().splitlines():
        what, n, number, pid, at = line.split()
        key = (int(n), int(number))
        if what == "start":
            assert key not in found, f"run {n} start {number} logged twice"
            found[key] = Interval(int(n), int(number), int(pid), float(at))
        else:
            found[key].end = float(at)
    return sorted(found.values(), key=lambda i: i.start)


def start_worker(url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "STEPSTONE_LIMITS_LOG": str(log)}
    command = [sys.executable, str(HERE / "limit_worker.py"), url, str(LEASE)]
    return subprocess.Popen(command, env=env, cwd=HERE)


async def run_fleet(url: str, log: Path, *, die: bool) -> list[tuple[int, int]]:
    """Submit the runs, let two worker processes work them off, and return
    the attempts and lapses each run's outcome records."""
    api = JobRunner(url)  # submits and awaits; runs no worker
    handles = [await api.submit(Serial(key="acct-1", n=n, die=die)) for n in range(RUNS)]
    workers = [start_worker(url, log) for _ in range(2)]
    try:
        outcomes = [await h.join(timeout=120) for h in handles]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.terminate()
        for worker in workers:
            await asyncio.to_thread(worker.wait, 30)
        await api.close()
    assert all(o.ok for o in outcomes), [o.error for o in outcomes if not o.ok]
    return [(o.attempts, o.lapses) for o in outcomes]


@pytest.fixture(params=["file", "s3"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "s3":
        url: str = request.getfixturevalue("s3_url")
        return url
    root = tmp_path / "store"
    root.mkdir()
    return str(root)


async def test_two_processes_never_run_two_of_one_key_at_once(
    store_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "intervals.log"
    counted = await run_fleet(store_url, log, die=False)
    assert counted == [(1, 0)] * RUNS  # waiting for the key spent no attempt
    seen = intervals(log)
    assert sorted(i.n for i in seen) == list(range(RUNS))
    for before, after in itertools.pairwise(seen):
        assert before.end is not None and before.end <= after.start, (before, after)


async def test_a_sigkilled_holder_keeps_its_key_until_its_lease_lapses_and_no_longer(
    store_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "intervals.log"
    counted = await run_fleet(store_url, log, die=True)
    # The killed run was taken over. So may be the runs the dead process had
    # claimed besides (up to 3 at concurrency 4, on their way to wait for the
    # key): a crash is a lapse, spending no attempt, and waiting spends none.
    assert counted[0] == (1, 1)
    assert set(counted[1:]) <= {(1, 0), (1, 1)} and counted[1:].count((1, 1)) <= 3
    seen = intervals(log)
    killed = next(i for i in seen if i.n == 0 and i.start_number == 1)
    assert killed.end is None
    finished = [i for i in seen if i is not killed]
    assert sorted(i.n for i in finished) == list(range(RUNS))
    for before, after in itertools.pairwise(finished):
        assert before.end is not None and before.end <= after.start, (before, after)
    # Nobody started while the dead holder's lease could still hold the key
    # (it was claimed, so its lease began, a moment before it started).
    following = [i for i in finished if i.start > killed.start]
    assert following, "every run started before the holder died"
    assert following[0].start - killed.start >= LEASE - 1.0
    assert all(i.end is not None and i.end <= killed.start for i in finished if i not in following)
