"""Clock skew: three worker processes whose clocks are 5 s slow, right and
5 s fast (each worker's JobRunner and StoreQueue read a SystemClock offset by
its skew), on one store.

- Lease much longer than the skew (30 s): every job is claimed once and every
  step runs once. Skew only moves when a lease *looks* lapsed, by at most the
  skew, and 30 - 10 s is far longer than any job here.
- Lease shorter than the skew (2 s): a lease written on one clock has already
  lapsed on a clock that is ahead of it by more than the lease, so the fast
  worker takes over jobs the others are running (and everyone takes over the
  slow worker's at once). Steps then run again on the second claim unless their
  memo had landed; the engine still records one result per step (the first
  writer's) and one outcome per run. This is the cost guarantees.md names
  under "Clock agreement"; the figures are printed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rel_crash import CrashReport, run_crash

pytestmark = pytest.mark.slow

SKEWS = [{"REL_CLOCK_OFFSET": "-5"}, {"REL_CLOCK_OFFSET": "0"}, {"REL_CLOCK_OFFSET": "5"}]
JOBS = 30


async def run(tmp_path: Path, lease: float) -> CrashReport:
    return await run_crash(
        tmp_path,
        jobs=JOBS,
        workers=3,
        concurrency=4,
        lease=lease,
        kill_spec="",
        parent_kill_every=None,
        deadline=90,
        per_worker=SKEWS,
        REL_STEP_SLEEP="0.8",
    )


async def test_a_lease_longer_than_the_skew_runs_each_job_once(tmp_path: Path) -> None:
    report = await run(tmp_path, lease=30.0)
    print(f"\nskew +-5s, lease 30s: {report.figures()}")
    assert not report.problems, "\n".join(report.problems[:20])
    assert report.lost == 0 and report.succeeded == JOBS
    assert report.claims == JOBS, "a job was claimed twice"
    assert report.repeats == 0 and report.executions == 3 * JOBS
    assert report.max_attempts_seen == 1


async def test_a_lease_shorter_than_the_skew_repeats_work_but_records_it_once(
    tmp_path: Path,
) -> None:
    report = await run(tmp_path, lease=2.0)
    print(f"\nskew +-5s, lease 2s: {report.figures()}")
    # What must still hold: nothing lost, one outcome per run, each step's
    # memo the first writer's, each result its memos (all checked by the audit).
    assert not report.problems, "\n".join(report.problems[:20])
    assert report.lost == 0 and report.succeeded == JOBS and report.queue_left == 0
    # And what the skew costs: takeovers of live leases (nobody was killed, so
    # every repeat overlapped a live holder).
    assert report.repeats_after_death == 0
    assert report.repeats == report.repeats_overlap
