"""A keyed multi-step load on S3, on moto and on a real server (CI: Ceph
RGW 16): jobs submitted here, run by worker processes that kill themselves
at random at the dangerous points (inside a step, after a memo, before the
outcome) and are started again. Every job ends with its outcome; each
step's recorded value is one execution's; a step runs again only where an
execution of it died; the queue ends empty; a resubmit of every key joins
its outcome.

On the real server this is the engine as a user runs it there: etags sent
in the form the store found out, every fenced ack and slot delete a fenced
swap to a husk (its DeleteObject ignores If-Match), lost If-Match races
answered 500 and decided by write tokens."""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from rel_jobs import STEPS, ThreeSteps, read_events
from rel_support import Workers, submitter

from stepstone import JobRunner
from stepstone.store import NotFound

pytestmark = pytest.mark.slow

JOBS = {"moto": 20, "real": 60}
"""Jobs a run: moto answers about a hundred requests a second, RGW several hundred."""
KILLS = "in_step=0.01,after_memo=0.01,before_outcome=0.01"
DEADLINE = 150.0


async def test_a_keyed_three_step_load_with_killed_workers_loses_nothing_on_s3(
    tmp_path: Path, both_s3_url: str, request: pytest.FixtureRequest
) -> None:
    jobs = JOBS[request.node.callspec.params["both_s3_url"]]
    events = tmp_path / "events.log"
    pool = Workers(
        both_s3_url, events, tmp_path / "logs", REL_LEASE="3", REL_KILL=KILLS, REL_SEED="41"
    )
    runner = submitter(both_s3_url)
    started = time.monotonic()
    try:
        for _ in range(2):
            pool.start()
        handles = await asyncio.gather(*(runner.submit(ThreeSteps(n=n)) for n in range(jobs)))
        assert all(h.newly_submitted for h in handles)
        waiting = {asyncio.ensure_future(h.result(timeout=DEADLINE)) for h in handles}
        while waiting:
            _, waiting = await asyncio.wait(waiting, timeout=0.5)
            for dead in pool.dead():
                pool.restart(dead)
            assert time.monotonic() - started < DEADLINE, pool.log_tail()
        results = {h.id: await h.result(timeout=1) for h in handles}
        assert await _queue_records_left(runner) == []

        log = read_events(str(events))
        killed = {e[2] for e in log if e[0] == "KILL"} | {e[1] for e in log if e[0] == "PKILL"}
        executions: dict[tuple[str, str], list[str]] = defaultdict(list)
        values: dict[tuple[str, str], set[str]] = defaultdict(set)
        for e in log:
            if e[0] == "EXEC":
                executions[(e[1], e[2])].append(e[3])
                values[(e[1], e[2])].add(f"{e[2]}:{e[3]}:{e[4]}")
        for run, result in results.items():
            assert [value.split(":")[0] for value in result] == list(STEPS), result
            for step, value in zip(STEPS, result, strict=True):
                assert value in values[(run, step)], f"{run} {step}: {value} never ran"
                pids = executions[(run, step)]
                # A step runs again only where an execution of it died before its memo landed.
                assert all(pid in killed for pid in pids[:-1]), (run, step, pids, killed)
        repeats = sum(len(pids) - 1 for pids in executions.values())
        print(
            f"\n{jobs} jobs in {time.monotonic() - started:.1f} s; {len(killed)} worker deaths, "
            f"{repeats} step repeats, {Counter(e[0] for e in log)['CLAIM']} claims"
        )

        again = await asyncio.gather(*(runner.submit(ThreeSteps(n=n)) for n in range(jobs)))
        assert not any(h.newly_submitted for h in again)
        assert {h.id: await h.result(timeout=10) for h in again} == results
    finally:
        await pool.stop_all()
        pool.kill_all()
        await runner.store.close()


async def _queue_records_left(runner: JobRunner) -> list[str]:
    """The queue records still there. On a store whose DeleteObject ignores
    If-Match (Ceph RGW 16) a worker killed between a fenced delete's two
    requests leaves a husk, which a LIST shows but every read takes for no
    object (stepstone.store.s3.husks): not a record left."""
    store = runner.store
    left = []
    for info in await store.list("queue/jobs/"):
        try:
            await store.get(info.key)
        except NotFound:
            continue
        left.append(info.key)
    return left
