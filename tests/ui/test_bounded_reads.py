"""What a page of the web view reads per refresh does not grow with the
finished runs a store holds: the same requests, counted exactly, on a store
of 1,200 finished runs and on one of 2,400 (the records seeded as the
benchmark seeds them: benchmarks/ui_scale.py, which times them at 100,000).

A refresh reads the queue records that changed since the last (none here),
at most ``OUTCOME_READS`` outcome records, and lists the outcomes beside the
page (:mod:`stepstone.ops.finished`); a run's page reads that run's records.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from benchmarks.counting import CountingStore
from benchmarks.ui_scale import Seeded, ask, seed
from stepstone import JobRunner
from stepstone.store.file import FileStore
from stepstone.ui.app import create_app
from stepstone.ui.routes import OUTCOME_READS

LIVE = 40


def seeded(root: Path, finished: int) -> Seeded:
    return seed(root, finished=finished, live=LIVE, now=time.time(), rng=random.Random(3))


def paths(store: Seeded) -> dict[str, str]:
    return {
        "runs": "/",
        "succeeded": "/?state=succeeded",
        "failed": "/?state=failed",
        "ready": "/?state=ready",
        "rare kind": "/?kind=audit.rare",
        "key prefix": "/?key=no-such-key-",
        "finished run": f"/runs/{store.finished[0]}",
        "parent run": f"/runs/{store.parent}",
        "running run": f"/runs/{store.live['running'][0]}",
    }


async def refresh_reads(store: Seeded) -> dict[str, dict[str, int]]:
    """Per page: the GETs and HEADs of a refresh (after the first load)."""
    counting = CountingStore(FileStore(store.root))
    runner = JobRunner(counting)
    app = create_app(runner, refresh=1.0, hosts=["testserver"])
    out: dict[str, dict[str, int]] = {}
    try:
        for name, path in paths(store).items():
            status, body = await ask(app, path)
            assert status == 200, body[:500]
            counting.reset()
            status, _ = await ask(app, path)
            assert status == 200
            taken = counting.snapshot()
            assert taken["PUT"] == taken["CPUT"] == taken["DELETE"] == 0, name
            out[name] = {"GET": taken["GET"], "HEAD": taken["HEAD"]}
    finally:
        await app.state.finished.close()
        await runner.close()
    return out


@pytest.mark.slow
async def test_a_pages_reads_do_not_grow_with_the_finished_runs(tmp_path: Path) -> None:
    small = await refresh_reads(seeded(tmp_path / "small", 1200))
    large = await refresh_reads(seeded(tmp_path / "large", 2400))
    assert small == large
    dead = 1  # a dead run's failed outcome, read beside its queue record
    assert large == {
        "runs": {"GET": 100 + dead, "HEAD": 0},  # the newest hundred, all finished
        # Read a hundred at a time: the newest hundred held a few that did not succeed.
        "succeeded": {"GET": 200, "HEAD": 0},
        "failed": {"GET": OUTCOME_READS, "HEAD": 0},  # few fail: the budget, no more
        "ready": {"GET": 0, "HEAD": 0},  # queue records are read once, then as they change
        "rare kind": {"GET": OUTCOME_READS, "HEAD": 0},
        "key prefix": {"GET": OUTCOME_READS, "HEAD": 0},
        "finished run": {"GET": 4, "HEAD": 0},
        "parent run": {"GET": 4 + 2 * 5, "HEAD": 0},  # and its five children's records
        "running run": {"GET": 3, "HEAD": 0},
    }
