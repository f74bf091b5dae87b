"""A schedule's overlap policy across real processes: three workers carry a
schedule ticking every second whose runs hold their worker 1.5 s, on a
directory store and on S3 (moto); one of them is SIGKILLed while it runs a
tick. Each run logs its start and end. Under ``skip`` and ``buffer_one``
the schedule's runs never overlap (a run killed mid-way is live until its
takeover ends it, and no tick starts meanwhile); under ``allow_all`` they
do. Whatever the policy, each tick's run ends once."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sched_worker import HOLD, LEASE

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
WORKERS = 3
RUN_FOR = 10.0
"""Seconds the fleet runs, the kill and the takeover within."""


@dataclass
class Tick:
    at: str
    starts: list[tuple[int, float]] = field(default_factory=list)
    ends: list[tuple[int, float]] = field(default_factory=list)

    @property
    def live(self) -> tuple[float, float]:
        """From its first start to its last end: while its run was live."""
        return min(t for _, t in self.starts), max(t for _, t in self.ends)


def ticks(log: Path) -> dict[str, Tick]:
    found: dict[str, Tick] = defaultdict(lambda: Tick(""))
    for line in (log.read_text() if log.exists() else "").splitlines():
        what, at, pid, when = line.split()
        tick = found[at]
        tick.at = at
        (tick.starts if what == "start" else tick.ends).append((int(pid), float(when)))
    return dict(found)


def start_worker(url: str, overlap: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "STEPSTONE_SCHED_LOG": str(log)}
    command = [sys.executable, str(HERE / "sched_worker.py"), url, overlap]
    return subprocess.Popen(command, env=env, cwd=HERE)


async def run_fleet(url: str, overlap: str, log: Path) -> int:
    """Run the fleet RUN_FOR seconds, SIGKILL a worker while it runs a tick;
    return the killed worker's pid."""
    workers = [start_worker(url, overlap, log) for _ in range(WORKERS)]
    killed = 0
    try:
        deadline = time.monotonic() + 60  # (the processes take a while to come up here)
        while not killed:
            assert time.monotonic() < deadline, f"no run started: {ticks(log)}"
            await asyncio.sleep(0.05)
            running = [t for t in ticks(log).values() if t.starts and not t.ends]
            if len(ticks(log)) >= 2 and running:
                killed = running[-1].starts[-1][0]
                os.kill(killed, signal.SIGKILL)
        await asyncio.sleep(RUN_FOR)
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.terminate()
        for worker in workers:
            await asyncio.to_thread(worker.wait, 60)
    return killed


@pytest.fixture
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "s3":
        url: str = request.getfixturevalue("s3_url")
        return url
    root = tmp_path / "store"
    root.mkdir()
    return str(root)


@pytest.mark.parametrize(
    ("store_url", "overlap"),
    [("file", "skip"), ("file", "buffer_one"), ("file", "allow_all"), ("s3", "skip")],
    indirect=["store_url"],
)
async def test_a_fleet_under_a_sigkill_keeps_the_overlap_policy(
    store_url: str, overlap: str, tmp_path: Path
) -> None:
    log = tmp_path / "runs.log"
    killed = await run_fleet(store_url, overlap, log)
    found = ticks(log)
    ended = [tick for tick in found.values() if tick.ends]
    # Each tick's run ends once; a second start of one is the takeover of a
    # run the SIGKILL cut short (that start in the killed process, unended).
    for tick in found.values():
        assert len(tick.ends) <= 1, tick
        assert len(tick.starts) <= 2, tick
        if len(tick.starts) == 2:
            assert tick.starts[0][0] == killed, tick
    cut_short = [tick for tick in found.values() if len(tick.starts) == 2 and tick.ends]
    assert cut_short, "the killed worker's run was not taken over"
    assert len(ended) >= 3, found
    spans = sorted(tick.live for tick in ended)
    if overlap == "allow_all":
        assert any(a[1] > b[0] for a, b in itertools.pairwise(spans)), spans
    else:
        for before, after in itertools.pairwise(spans):
            assert before[1] <= after[0], (before, after)
        # The run cut short was live until its takeover ended it, a lease on.
        taken = cut_short[0].live
        assert taken[1] - taken[0] >= LEASE - 1.0 + HOLD - 1.0, taken
