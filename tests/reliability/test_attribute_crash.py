"""The index of attributes under SIGKILL: a process submitting and running
runs with attributes (tests/reliability/rel_attrs_app.py) is killed at
random moments, between any two of its writes; afterwards every run that
exists is found by the attributes it was submitted with, every run that
ended is found by those it set, no listing shows a run that is not there,
the entries a killed submit left naming no run are removed by the listing
that meets them once they are old, and the sweep leaves no entry behind."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rel_attrs_app import runner
from rel_support import HERE, SRC, wait_for

from stepstone import JobStatus
from stepstone.records.attributes import ORPHAN_AGE, entry_of, values_prefix
from stepstone.records.index_sweep import sweep_index
from stepstone.records.retention import sweep
from stepstone.runtime import FakeClock

pytestmark = pytest.mark.slow

ROUNDS = 4
DEADLINE = 60.0


def _start(root: Path, start: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "rel_attrs_app.py"), str(root), str(start)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(SRC)])},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=str(HERE),
    )


async def _kill_after_some(proc: subprocess.Popen[str], rng: random.Random) -> None:
    """SIGKILL ``proc`` a random moment after it has submitted a few batches."""
    assert proc.stdout is not None
    batches = rng.randint(2, 6)
    for _ in range(batches):
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), DEADLINE)
        assert line, f"the app exited with {proc.poll()} before it was killed"
    await asyncio.sleep(rng.uniform(0.0, 0.05))  # (a random moment: between any two writes)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


async def test_runs_are_found_by_their_attributes_after_kills(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    rng = random.Random()
    for round_ in range(ROUNDS):
        await _kill_after_some(_start(root, round_ * 100_000), rng)

    # A process of the same worker id takes back what the killed ones held,
    # and finishes every run.
    clock = FakeClock(time.time())
    async with runner(str(root), clock=clock) as finisher:

        async def every_run_ended() -> bool:
            live = await finisher.runs(status=None, limit=None)
            return bool(live) and all(row.status.finished for row in live)

        await wait_for(every_run_ended, DEADLINE, "every run to end")
        every = await finisher.runs(limit=None)
        found = await finisher.runs(attributes={"tenant": "acme"}, limit=None)
        set_inside = await finisher.runs(attributes={"stage": "set"}, limit=None)
        assert {row.status for row in every} == {JobStatus.SUCCEEDED}
        # Every run is found by what it was submitted with, and by what it set.
        assert {row.id for row in found} == {row.id for row in every}
        assert {row.id for row in set_inside} == {row.id for row in every}
        for round_ in range(ROUNDS):
            batch = await finisher.runs(attributes={"batch": str(round_ * 100_000)}, limit=None)
            assert batch, f"no run of batch {round_}"
            odd = await finisher.runs(attributes={"batch": str(round_ * 100_000), "parity": "1"})
            assert {row.id for row in odd} <= {row.id for row in batch}

        # What a killed submit left names no run: an hour on, the listing that
        # meets such an entry removes it, and the sweep of the index the rest;
        # then every entry names a run, one entry per run and attribute.
        clock.set(time.time() + ORPHAN_AGE + 60)
        await finisher.runs(attributes={"tenant": "acme"}, limit=None)
        ids = {row.id for row in every}
        prefix = values_prefix(finisher.layout, "tenant", "acme")
        named = [entry_of(prefix, info.key) async for info in finisher.store.scan(prefix)]
        assert {entry.run_id for entry in named if entry is not None} == ids
        await sweep_index(finisher)
        left = [info.key async for info in finisher.store.scan("index/")]
        assert {key.split("/")[4] for key in left} == ids
        # (tenant, batch, stage, parity: a keyed run's joins may have left more
        # under its id, which go with it)
        assert len(left) >= 4 * len(ids)

        # The sweep takes every run's entries with it.
        assert await sweep(finisher, retention=60) == len(ids)
        assert [info.key async for info in finisher.store.scan("index/")] == []
