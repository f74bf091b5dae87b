"""Store faults: the engine retries through a flaky, slow store, and rides out
an outage. stepstone.store.doubles.faults.FaultyStore over a FileStore, under a StoreQueue and
a JobRunner in this process (the submitter and the worker both see the faults).

- 10% of all calls fail with StoreUnavailable (half of them after the write
  landed: a lost answer), every call is delayed: every job still succeeds,
  with the results its memos recorded, on the runner's default 3 attempts.
- A full outage: submit raises StoreUnavailable naming the store, the worker
  keeps running through it, and everything finishes by itself once it is back.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import msgpack
import pytest
from rel_jobs import STEPS, Plain3, read_events
from rel_support import wait_for

from stepstone import JobHandle, JobRunner, JobStatus
from stepstone.records.calls import PositionedMemo
from stepstone.runtime.store_queue import StoreQueue
from stepstone.store import FileStore, StoreUnavailable
from stepstone.store.doubles.faults import FaultyStore

pytestmark = pytest.mark.slow

JOBS = 100


@pytest.fixture
async def inner(tmp_path: Path) -> AsyncIterator[FileStore]:
    store = FileStore(tmp_path / "store")
    yield store
    await store.close()


@pytest.fixture
def events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "events.log"
    monkeypatch.setenv("REL_EVENTS", str(path))
    return path


def make_runner(store: FaultyStore, lease: float = 5.0) -> JobRunner:
    queue = StoreQueue(store, prefix="queue", scan_interval=0.1)
    return JobRunner(
        store,
        queue=queue,
        jobs=[Plain3],
        concurrency=16,
        lease=lease,
        retry_backoff=0.05,
        retry_backoff_cap=0.5,
        poll_interval=0.05,
    )


async def submit_through(
    runner: JobRunner, job: Plain3, errors: Counter[str]
) -> JobHandle[list[str]]:
    """What a caller does with a transient error at submit: try again (the job
    is keyed, so a retry cannot make a second run)."""
    for _ in range(50):
        try:
            return await runner.submit(job)
        except StoreUnavailable:
            errors["submit"] += 1
    raise AssertionError("50 submits in a row failed")


async def check_results(
    inner: FileStore, handles: list[JobHandle[list[str]]], events: Path
) -> tuple[int, int]:
    """Every job succeeded and its result is exactly its three memos; returns
    (step executions, repeats)."""
    execs = Counter((e[1], e[2], e[4]) for e in read_events(str(events)) if e[0] == "EXEC")
    for handle in handles:
        outcome = await handle.join(timeout=60)
        assert outcome.status is JobStatus.SUCCEEDED, outcome.error
        memo_prefix = f"memos/{handle.id}/"
        recorded = [
            PositionedMemo.decode((await inner.get(info.key)).data)
            async for info in inner.scan(memo_prefix)
        ]
        memos = {memo.call.name: memo.value for memo in recorded}
        assert sorted(memos) == sorted(STEPS), memos
        values = [msgpack.unpackb(memos[s]) for s in STEPS]
        assert outcome.result == values, "the result is not what the memos recorded"
        for step, value in zip(STEPS, values, strict=True):
            token = value.rsplit(":", 1)[-1]
            assert execs[(handle.id, step, token)] == 1, f"memo {value} was never executed"
    total = sum(execs.values())
    return total, total - 3 * len(handles)


async def test_transient_errors_and_latency_on_every_call(inner: FileStore, events: Path) -> None:
    faulty = FaultyStore(inner, error_rate=0.1, latency=(0.0, 0.004), seed=5)
    runner = make_runner(faulty)
    errors: Counter[str] = Counter()
    started = time.monotonic()
    async with runner:
        handles = await asyncio.gather(
            *(submit_through(runner, Plain3(n=i), errors) for i in range(JOBS))
        )
        # Awaiting polls through the faults too: a failed poll is not an answer.
        outcomes = await asyncio.gather(*(h.join(timeout=90) for h in handles))
    elapsed = time.monotonic() - started
    assert [o.status for o in outcomes] == [JobStatus.SUCCEEDED] * JOBS, [
        o.error for o in outcomes if not o.ok
    ]
    executions, repeats = await check_results(inner, handles, events)
    injected = sum(faulty.injected.values())
    stats = runner.worker.stats
    print(
        f"\nstore faults: {JOBS} jobs, {injected} injected failures "
        f"({dict(sorted(Counter(w for _, w in faulty.injected.elements()).items()))}), "
        f"{errors['submit']} submits retried by the caller, attempts retried "
        f"{stats.retried}, queue errors {stats.queue_errors}, step executions "
        f"{executions} (repeats {repeats}), {elapsed:.1f}s"
    )
    assert injected >= 50, "too few faults to prove anything"
    assert {when for _, when in faulty.injected} >= {"before", "after"}
    assert stats.dead == 0


async def test_an_outage_fails_submits_clearly_and_the_worker_rides_it_out(
    inner: FileStore, events: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REL_STEP_SLEEP", "0.05")
    faulty = FaultyStore(inner)
    lease = 2.0
    runner = make_runner(faulty, lease=lease)
    async with runner:
        first = [await runner.submit(Plain3(n=i)) for i in range(3)]
        for handle in first:
            assert (await handle.join(timeout=30)).ok
        during = [await runner.submit(Plain3(n=i)) for i in range(10, 30)]
        await wait_for(lambda: runner.worker.in_flight > 0, 10, "jobs to be in flight")

        faulty.down()
        down_at = time.monotonic()
        with pytest.raises(StoreUnavailable) as refused:
            await runner.submit(Plain3(n=99))
        assert faulty.location in str(refused.value)
        errors_before = runner.worker.stats.queue_errors
        # Down for longer than a lease: renewals fail, leases lapse, claims fail.
        await wait_for(
            lambda: (
                time.monotonic() > down_at + lease + 0.5
                and runner.worker.stats.queue_errors >= errors_before + 5
            ),
            30,
            "the worker to keep failing against the outage",
        )
        loop_task = runner.worker._loop_task
        assert loop_task is not None and not loop_task.done(), "the worker died in the outage"

        faulty.up()
        after = await runner.submit(Plain3(n=100))
        outcomes = await asyncio.gather(*(h.join(timeout=60) for h in [*during, after]))
    assert all(o.ok for o in outcomes), [o.error for o in outcomes if not o.ok]
    await check_results(inner, [*first, *during, after], events)
    print(
        f"\noutage: {sum(faulty.injected.values())} calls refused while down, "
        f"worker queue errors {runner.worker.stats.queue_errors}, "
        f"{len(during)} jobs caught in it all succeeded, most attempts "
        f"{max(o.attempts for o in outcomes)}"
    )
