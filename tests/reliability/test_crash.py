"""Crash recovery (guarantees 2, 3 and 5), on a directory store and on a
SQLite file: real worker processes SIGKILLed at random moments, by their own
hooks at the dangerous points (inside a step,
between a step and its memo, between the memo and the step's return, around
the outcome write, right after a claim) and by the test at random times,
restarted until every job has finished. Nothing may be lost; every memo and
every outcome is written once; a step runs again only when its memo had not
landed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rel_crash import run_crash

pytestmark = pytest.mark.slow

JOBS = int(os.environ.get("REL_CRASH_JOBS", "300"))


@pytest.mark.parametrize("kind", ["file", "sqlite"])
async def test_sigkilled_workers_lose_nothing_and_write_everything_once(
    tmp_path: Path, kind: str
) -> None:
    store = ""  # (a directory)
    if kind == "sqlite":
        (tmp_path / "jobs.db").write_bytes(b"")  # (an empty file is an empty store)
        store = f"sqlite://{tmp_path / 'jobs.db'}"
    report = await run_crash(tmp_path, jobs=JOBS, workers=4, lease=2.0, seed=20261129, store=store)
    print("\ncrash run:", report.figures())
    assert not report.problems, "\n".join(report.problems[:20])
    assert report.lost == 0
    assert report.outcomes == report.succeeded == JOBS
    assert report.queue_left == 0
    # The run must actually have been violent, or it proves nothing.
    assert report.kills >= 10, report.figures()
    assert report.self_kills, "no worker died at a hook"
    # Every repeat is explained: its earlier execution died before its memo landed
    # (or, rarely, a live worker's lease lapsed under it; reported, allowed).
    assert report.repeats == report.repeats_after_death + report.repeats_overlap
    assert report.executions == 3 * JOBS + report.repeats


async def test_sigkilled_workers_of_runs_that_fan_out_give_each_branch_its_own_memos(
    tmp_path: Path,
) -> None:
    """The same, each run's three steps three concurrent branches that
    start in a random order on every attempt: each memo is its own step's,
    and each run's result is its steps' in their order."""
    jobs = JOBS // 3
    report = await run_crash(
        tmp_path, jobs=jobs, workers=4, lease=2.0, seed=20261206, branches=True
    )
    print("\ncrash run, branches:", report.figures())
    assert not report.problems, "\n".join(report.problems[:20])
    assert report.outcomes == report.succeeded == jobs
    assert report.kills >= 3, report.figures()
    assert report.repeats == report.repeats_after_death + report.repeats_overlap
