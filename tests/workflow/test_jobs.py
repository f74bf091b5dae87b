"""The job API's behaviour, scenario by scenario (the taquba-workflow jobs
tests, and what the engine promises beyond them)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import ConfigDict, Field
from wf_jobs import (
    Adder,
    AlwaysFlaky,
    BadResult,
    Capped,
    Coordinator,
    Counters,
    ExtendsLease,
    FixedKey,
    GatedKeyed,
    Increment,
    Keyed,
    KeyedFailure,
    KeyedStep,
    MemoThenFail,
    Progressing,
    ProgressThenFail,
    Reclaimable,
    RepeatedSteps,
    SlowWithTimeout,
    SyncJob,
    TypedSteps,
    Unserializable,
    ZombieStep,
)
from wf_support import wait_until

from stepstone import (
    DuplicateJobName,
    EncodingError,
    InputMismatch,
    Job,
    JobCancelled,
    JobContext,
    JobFailed,
    JobRunner,
    JobStatus,
    SubmitOptions,
    payload_idempotency_key,
)
from stepstone.ops.reads import read_outcome
from stepstone.records.calls import Call, PositionedMemo
from stepstone.records.codec import pack, unpack
from stepstone.records.envelope import Envelope
from stepstone.records.layout import position_key, run_id_for_key
from stepstone.records.outcome import OutcomeRecord
from stepstone.records.retention import remove_run
from stepstone.store import MemoryStore
from stepstone.testing import FakeClock

BOTH_SUBMIT_ORDERS = True  # (conftest: keyed submits also in a remote store's order)

MakeRunner = Callable[..., JobRunner]
DEADLINE = 10.0


async def test_unkeyed_submits_are_always_new(runner: JobRunner) -> None:
    first = await runner.submit(Adder(a=1, b=2))
    second = await runner.submit(Adder(a=1, b=2))
    assert first.newly_submitted and second.newly_submitted
    assert first.id != second.id
    assert await first == 3 and await second == 3


async def test_submit_run_await(runner: JobRunner) -> None:
    handle = await runner.submit(Adder(a=20, b=22))
    assert await handle == 42
    outcome = await handle.join()
    assert outcome.ok and outcome.result == 42 and outcome.attempts == 1


async def test_a_memo_survives_a_retry(runner: JobRunner, counters: Counters) -> None:
    handle = await runner.submit(MemoThenFail(seed=4))
    assert await handle == 41
    assert counters.counts["expensive"] == 1, "the memoized step ran again on the retry"
    assert (await handle.join()).attempts == 2


async def test_lease_extension_from_the_handler_reaches_the_queue(
    runner: JobRunner, clock: FakeClock, counters: Counters
) -> None:
    handle = await runner.submit(ExtendsLease())
    await wait_until(counters.started.is_set)
    record = await runner.queue.get(handle.id)
    assert record is not None and record.lease_expires_at is not None
    assert record.lease_expires_at >= clock.now() + 3600, "the queue's lease was not extended"
    counters.gate.set()
    assert await handle >= clock.now() + 3600


async def test_permanent_failure_is_dead_with_the_error_recorded(runner: JobRunner) -> None:
    handle = await runner.submit(KeyedFailure(n=7))
    with pytest.raises(JobFailed) as failed:
        await handle
    assert failed.value.reason == "permanent"
    assert "refusing 7" in failed.value.message
    assert (await handle.join()).attempts == 1
    record = await runner.queue.get(handle.id)
    assert record is not None and record.status is JobStatus.DEAD


async def test_keyed_duplicates_collapse_while_pending(
    make_runner: MakeRunner, counters: Counters
) -> None:
    runner = make_runner(jobs=[Keyed])
    first = await runner.submit(Keyed(n=3))
    second = await runner.submit(Keyed(n=3))
    assert first.newly_submitted and not second.newly_submitted
    assert first.id == second.id == run_id_for_key("keyed:3")
    async with runner:
        assert await second == 3
        assert await first == 3
    assert counters.counts["keyed"] == 1


async def test_a_duplicate_joins_the_in_flight_run(runner: JobRunner, counters: Counters) -> None:
    first = await runner.submit(GatedKeyed(n=5))
    await wait_until(counters.started.is_set)
    second = await runner.submit(GatedKeyed(n=5))
    assert not second.newly_submitted and second.id == first.id
    counters.gate.set()
    assert await second == 5 and await first == 5
    assert counters.counts["gated"] == 1


async def test_input_mismatch_on_the_same_key(make_runner: MakeRunner) -> None:
    runner = make_runner()
    await runner.submit(FixedKey(content="alpha"))
    with pytest.raises(InputMismatch) as mismatch:
        await runner.submit(FixedKey(content="beta"))
    assert mismatch.value.run_id == run_id_for_key("fixed")
    # And after a restart: a new runner on the same store and queue.
    with pytest.raises(InputMismatch):
        await make_runner().submit(FixedKey(content="beta"))


async def test_input_mismatch_against_a_finished_run(runner: JobRunner) -> None:
    assert await (await runner.submit(FixedKey(content="alpha"))) == "alpha"
    with pytest.raises(InputMismatch):
        await runner.submit(FixedKey(content="beta"))


async def test_cached_success_after_completion_and_after_restart(
    make_runner: MakeRunner, counters: Counters
) -> None:
    async with make_runner(jobs=[Keyed]) as runner:
        first = await runner.submit(Keyed(n=42))
        assert first.newly_submitted
        assert await first == 42
        second = await runner.submit(Keyed(n=42))
        assert not second.newly_submitted and second.id == first.id
        assert await second == 42
    # A new runner that does not even run a worker answers from the record.
    restarted = make_runner()
    third = await restarted.submit(Keyed(n=42))
    assert not third.newly_submitted and third.id == first.id
    cached = await third.poll()
    assert cached is not None and cached.result == 42
    assert await third == 42
    assert counters.counts["keyed"] == 1


async def test_cached_failure_after_completion_and_after_restart(make_runner: MakeRunner) -> None:
    async with make_runner(jobs=[KeyedFailure]) as runner:
        first = await runner.submit(KeyedFailure(n=7))
        with pytest.raises(JobFailed):
            await first
        second = await runner.submit(KeyedFailure(n=7))
        assert not second.newly_submitted and second.id == first.id
        with pytest.raises(JobFailed) as failed:
            await second
        assert failed.value.reason == "permanent"
    third = await make_runner().submit(KeyedFailure(n=7))
    assert not third.newly_submitted
    outcome = await third.join()
    assert outcome.status is JobStatus.FAILED
    assert outcome.error is not None and "refusing 7" in outcome.error.message


async def test_resubmit_after_the_records_were_swept_runs_again_under_the_same_id(
    runner: JobRunner, counters: Counters, store: MemoryStore
) -> None:
    first = await runner.submit(KeyedStep(n=1))
    assert await first == 1
    old = await read_outcome(runner, first.id)
    assert old is not None

    await remove_run(runner, first.id)
    assert await runner.outcome(first.id, int) is None
    # A zombie of the swept run writes its memo late: the next run must not see it.
    await store.put(runner.layout.memo(first.id, old.incarnation, "count"), pack(999))

    second = await runner.submit(KeyedStep(n=1))
    assert second.newly_submitted and second.id == first.id
    assert await second == 2, "the new run replayed a memo of the swept run"
    assert counters.counts["keyed-step"] == 2


async def test_retention_removes_the_outcome(make_runner: MakeRunner, clock: FakeClock) -> None:
    async with make_runner(jobs=[Adder, MemoThenFail], retention=60) as runner:
        handle = await runner.submit(MemoThenFail(seed=1))
        assert await handle == 11
        memos = runner.layout.memos(handle.id)
        assert [i async for i in runner.store.scan(memos)], "the run left no memo to sweep"
        keep = await runner.submit(Adder(a=1, b=1))
        clock.advance(30)
        assert await keep == 2
        clock.advance(31)

        async def swept() -> bool:
            return await runner.outcome(handle.id, int) is None

        await wait_until(swept)
        assert [i async for i in runner.store.scan(memos)] == []
        assert await runner.outcome(keep.id, int) is not None, "a run inside the window was swept"


async def test_an_unknown_job_type_is_dead_with_no_handler_registered(
    make_runner: MakeRunner,
) -> None:
    async with make_runner() as runner:
        handle = await runner.submit(Keyed(n=9))
        outcome = await handle.join()
        assert outcome.status is JobStatus.FAILED
        assert outcome.error is not None
        assert "no handler registered" in outcome.error.message
        assert outcome.error.reason == "unknown"
        record = await runner.queue.get(handle.id)
        assert record is not None and record.status is JobStatus.DEAD


async def test_transient_failures_exhaust_and_dead_letter(
    make_runner: MakeRunner, counters: Counters
) -> None:
    async with make_runner(jobs=[AlwaysFlaky], max_attempts=2) as runner:
        handle = await runner.submit(AlwaysFlaky())
        with pytest.raises(JobFailed) as failed:
            await handle
        assert failed.value.reason == "exhausted"
        assert "flaky on attempt 2" in failed.value.message
        assert failed.value.error_type == "RuntimeError"
        assert counters.counts["flaky"] == 2
        record = await runner.queue.get(handle.id)
        assert record is not None and record.status is JobStatus.DEAD


async def test_awaiting_after_the_run_finished_reads_the_outcome_record(
    runner: JobRunner,
) -> None:
    handle = await runner.submit(Adder(a=11, b=31))

    async def recorded() -> bool:
        return await handle.poll() is not None

    await wait_until(recorded)
    assert await runner.queue.get(handle.id) is None, "the queue entry outlived the outcome"
    assert await runner.handle(handle.id, Adder) == 42


async def test_fan_out_from_a_handler_runs_each_child_once(
    make_runner: MakeRunner, counters: Counters
) -> None:

    async with make_runner(jobs=[Coordinator, Increment], max_attempts=2) as runner:
        assert await (await runner.submit(Coordinator(children=3))) == 0 + 1 + 2
    # The parent's body runs on attempt 1, on attempt 2, and once more each
    # time it resumes from waiting for its children (holding no slot meanwhile).
    assert counters.counts["coordinator"] >= 2, "the parent was meant to retry once"
    assert counters.counts["increment"] == 3, "a retried parent submitted its children again"


async def test_a_scheduled_job_runs_when_the_clock_passes_run_at(
    runner: JobRunner, clock: FakeClock
) -> None:
    run_at = datetime.fromtimestamp(clock.now() + 60, tz=UTC)
    handle = await runner.submit(Adder(a=5, b=7), SubmitOptions(run_at=run_at))
    state = await handle.status()
    assert state is not None and state.status == "scheduled"
    clock.advance(30)
    assert await handle.poll() is None
    clock.advance(90)
    assert await handle.result(timeout=5) == 12


async def test_lease_expiry_leads_to_a_takeover_on_the_same_attempt(
    make_runner: MakeRunner, clock: FakeClock, counters: Counters
) -> None:
    runner = make_runner(jobs=[Reclaimable], lease=10, heartbeat=0, drain_timeout=0.05)
    async with runner:
        handle = await runner.submit(Reclaimable())
        await wait_until(counters.started.is_set)
        assert counters.counts["reclaimable"] == 1
        clock.advance(30)
        assert await handle.result(timeout=5) == 1  # a lapse costs no attempt
        assert counters.counts["reclaimable"] == 2
        outcome = await handle.join()
        assert (outcome.attempts, outcome.lapses) == (1, 1)


# -- beyond the seed ---------------------------------------------------------


async def test_typed_replay_of_a_pydantic_step_result(
    runner: JobRunner, counters: Counters
) -> None:
    assert await (await runner.submit(TypedSteps(order="o-1"))) == "500 EUR (1, 2)"
    assert counters.counts["quote"] == 1 and counters.counts["pair"] == 1


async def test_a_name_used_again_is_numbered_by_call_order(
    runner: JobRunner, counters: Counters
) -> None:
    assert await (await runner.submit(RepeatedSteps())) == [1, 2, 3]
    assert counters.counts["tick"] == 3, "a replayed step ran again"


async def test_a_synchronous_job_runs_in_a_thread_with_sync_steps(runner: JobRunner) -> None:
    handle = await runner.submit(SyncJob(n=20))
    assert await handle == 41
    assert (await handle.join()).progress == {"done": 1}


async def test_progress_is_readable_through_status(runner: JobRunner) -> None:
    handle = await runner.submit(Progressing())
    assert await handle == 5
    state = await handle.status()
    assert state is not None and state.status == "succeeded"
    assert state.progress == {"done": 5, "of": 5}


async def test_a_step_result_that_cannot_be_stored_fails_permanently_naming_the_step(
    runner: JobRunner,
) -> None:
    with pytest.raises(JobFailed) as failed:
        await (await runner.submit(Unserializable()))
    assert failed.value.reason == "permanent"
    assert "test.unserializable-step" in failed.value.message
    assert "'bad'" in failed.value.message
    assert failed.value.error_type == "stepstone.errors.EncodingError"


class Opaque:
    pass


class BadInput(Job[int]):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    NAME: ClassVar[str] = "test.bad-input"
    thing: Any

    async def run(self, ctx: JobContext) -> int:
        return 1


async def test_an_input_that_cannot_be_encoded_is_refused_at_submit(runner: JobRunner) -> None:
    with pytest.raises(EncodingError, match=r"test\.bad-input"):
        await runner.submit(BadInput(thing=Opaque()))
    assert (await runner.queue.counts())[JobStatus.READY] == 0


class Measured(Job[float]):
    NAME: ClassVar[str] = "test.measured"
    x: float = 0.0
    xs: list[float] = Field(default_factory=list)
    by_name: dict[str, float] = Field(default_factory=dict)
    missing: float | None = None

    async def run(self, ctx: JobContext) -> float:
        return self.x + sum(self.xs) + sum(self.by_name.values())


class MeasuredAsConstants(Measured):
    """A model that asks pydantic to write NaN and Infinity as JSON constants."""

    model_config = ConfigDict(ser_json_inf_nan="constants")
    NAME: ClassVar[str] = "test.measured-constants"


@pytest.mark.parametrize(
    "bad",
    [
        Measured(x=float("nan")),
        Measured(xs=[1.0, float("inf")]),
        Measured(by_name={"a": float("-inf")}),
        MeasuredAsConstants(x=float("nan")),
    ],
    ids=["nan", "inf-in-a-list", "minus-inf-in-a-dict", "nan-as-a-json-constant"],
)
async def test_nan_and_infinite_floats_are_refused_at_submit(
    make_runner: MakeRunner, bad: Job[float]
) -> None:
    async with make_runner(jobs=[Measured]) as runner:
        with pytest.raises(EncodingError, match=bad.NAME.replace(".", r"\.")) as refused:
            await runner.submit(bad)
        assert "only finite floats" in str(refused.value)
        assert (await runner.queue.counts())[JobStatus.READY] == 0
        finite = Measured(x=1.5, xs=[2.0], by_name={"a": 0.5})
        assert await (await runner.submit(finite)) == 4.0


def test_two_job_types_with_one_name_are_refused(store: MemoryStore) -> None:
    class Other(Job[int]):
        NAME: ClassVar[str] = Adder.NAME

        async def run(self, ctx: JobContext) -> int:
            return 0

    with pytest.raises(DuplicateJobName, match=r"test\.adder"):
        JobRunner(store, jobs=[Adder, Other])


def test_payload_idempotency_key_is_stable_and_distinguishes_payloads() -> None:
    a = payload_idempotency_key(Keyed(n=7))
    assert a == payload_idempotency_key(Keyed(n=7))
    assert a != payload_idempotency_key(Keyed(n=8))
    name, digest = a.split(":", 1)
    assert name == Keyed.NAME and len(digest) == 64 and int(digest, 16) >= 0


async def test_cancel_a_pending_job(make_runner: MakeRunner) -> None:
    runner = make_runner(jobs=[Adder])
    handle = await runner.submit(Adder(a=1, b=1))
    assert await handle.cancel()
    assert not await handle.cancel(), "a second cancel reported success"
    with pytest.raises(JobCancelled):
        await handle
    assert await runner.queue.get(handle.id) is None


async def test_first_writer_wins_against_a_zombie(
    make_runner: MakeRunner, clock: FakeClock, counters: Counters
) -> None:
    """The first start stalls inside its step past its lease; the takeover
    (another worker) finishes the run. When the zombie wakes, its memo
    write, its outcome and its ack change nothing."""
    zombie = make_runner(jobs=[ZombieStep], concurrency=1, lease=10, heartbeat=0, drain_timeout=5)
    owner = make_runner(jobs=[ZombieStep], lease=10, heartbeat=0)
    async with zombie:
        handle = await zombie.submit(ZombieStep())
        await wait_until(counters.started.is_set)
        clock.advance(30)
        async with owner:
            assert await handle.result(timeout=5) == "written by start 2"
        counters.gate.set()  # the zombie wakes up and finishes its step
        await wait_until(lambda: counters.counts["start 1 saw: written by start 2"] == 1)
        await wait_until(lambda: zombie.worker.stats.lost == 1)
    assert counters.counts["zombie-step"] == 2
    outcome = await owner.outcome(handle.id, str)
    assert outcome is not None and outcome.result == "written by start 2"
    assert (outcome.attempts, outcome.lapses) == (1, 1)
    record = await read_outcome(owner, handle.id)
    assert record is not None
    memo = await owner.store.get(owner.layout.memo(handle.id, record.incarnation, position_key(1)))
    recorded = PositionedMemo.decode(memo.data)
    assert recorded.call == Call("step", "work")
    assert unpack(recorded.value) == "written by start 2"


async def test_many_synchronous_jobs_at_once_do_not_starve_each_other_of_threads(
    make_runner: MakeRunner,
) -> None:
    """More sync jobs in flight than the default executor has threads, each
    taking a sync step: the steps run in the jobs' own threads."""
    async with make_runner(jobs=[SyncJob], concurrency=24) as runner:
        handles = [await runner.submit(SyncJob(n=i)) for i in range(24)]
        results = [await h.result(timeout=20) for h in handles]
    assert results == [2 * i + 1 for i in range(24)]


async def test_a_job_result_that_cannot_be_stored_fails_permanently_naming_the_job(
    make_runner: MakeRunner,
) -> None:
    async with make_runner(jobs=[BadResult]) as runner:
        with pytest.raises(JobFailed) as failed:
            await (await runner.submit(BadResult()))
    assert failed.value.reason == "permanent"
    assert "test.bad-result" in failed.value.message and "result" in failed.value.message


async def test_a_worker_that_finds_the_outcome_recorded_settles_without_running(
    make_runner: MakeRunner, counters: Counters, clock: FakeClock
) -> None:
    """A keyed run submitted by another process (an API runner) whose outcome is
    already recorded when a worker claims it, as when that submit raced the end
    of the previous run: the worker settles it without running the job."""
    api = make_runner()
    handle = await api.submit(Keyed(n=5))
    queued = await api.queue.get(handle.id)
    assert queued is not None
    record = OutcomeRecord(
        run_id=handle.id,
        kind=Keyed.NAME,
        status=JobStatus.SUCCEEDED,
        input_hash=Envelope.decode(queued.payload).input_hash,
        incarnation="an-earlier-run",
        attempts=1,
        finished_at=clock.now(),
        result=pack(5),
    )
    await api.store.put(api.layout.outcome(handle.id), record.encode())
    async with make_runner(jobs=[Keyed]) as worker:
        assert await handle == 5
        await wait_until(lambda: worker.worker.stats.succeeded == 1)
    assert counters.counts["keyed"] == 0, "the job ran although its outcome was recorded"
    assert await api.queue.get(handle.id) is None, "the queue entry was not settled"


async def test_the_outcome_records_when_the_run_was_submitted_started_and_finished(
    runner: JobRunner, clock: FakeClock
) -> None:
    submitted = clock.now()
    handle = await runner.submit(Adder(a=1, b=2))
    outcome = await handle.join()
    assert outcome.submitted_at == submitted
    assert outcome.started_at is not None and outcome.started_at >= submitted
    assert outcome.finished_at >= outcome.started_at


async def test_a_worker_with_only_registered_leaves_other_job_types_waiting(
    make_runner: MakeRunner,
) -> None:
    async with make_runner(jobs=[Adder], only_registered=True) as runner:
        other = await runner.submit(Keyed(n=1))
        assert await (await runner.submit(Adder(a=1, b=1))) == 2
        state = await other.status()
        assert state is not None and state.status == "ready", state


async def test_a_failed_runs_last_progress_is_readable_through_status(
    make_runner: MakeRunner,
) -> None:
    async with make_runner(jobs=[ProgressThenFail]) as runner:
        handle = await runner.submit(ProgressThenFail())
        with pytest.raises(JobFailed):
            await handle
    state = await handle.status()
    assert state is not None and state.status == "failed"
    assert state.progress == {"done": 3, "of": 10}


async def test_a_job_types_max_in_flight_caps_it_within_the_runners_concurrency(
    make_runner: MakeRunner, counters: Counters
) -> None:
    async with make_runner(jobs=[Capped], concurrency=16) as runner:
        handles = [await runner.submit(Capped(i=i)) for i in range(12)]
        assert [await h for h in handles] == list(range(12))
    assert counters.counts["capped-peak"] == 2


async def test_a_job_types_attempt_timeout_fails_the_attempt(
    make_runner: MakeRunner, counters: Counters, clock: FakeClock
) -> None:
    async with make_runner(jobs=[SlowWithTimeout], drain_timeout=0.05) as runner:
        handle = await runner.submit(SlowWithTimeout())
        await wait_until(counters.started.is_set)
        clock.advance(6)
        with pytest.raises(JobFailed) as failed:
            await handle.result(timeout=5)
    assert failed.value.reason == "timeout"


async def test_a_handle_reads_nothing_while_this_process_queues_or_runs_its_job(
    counters: Counters,
) -> None:
    """However long a job queues and runs, awaiting it where it runs costs no
    store reads: the worker hands the outcome over (polling is for jobs that
    peers took)."""
    from stepstone.store.counting import GET, CountingStore

    class HandleReads(CountingStore):
        """Not the worker's read, as a keyed run ends, of the runs that
        joined it (stepstone.records.family): no handle's."""

        def _read(self, key: str) -> None:
            if not key.startswith("waiters/"):
                super()._read(key)

    store = HandleReads(MemoryStore())
    # What handles read, so not the worker's cancellation check (its own read
    # of a running job's outcome once a second: test_cancel_running.py).
    async with JobRunner(
        store, jobs=[GatedKeyed], state=[counters], concurrency=1, cancel_check=None
    ) as runner:
        running = await runner.submit(GatedKeyed(n=7))
        queued = await runner.submit(GatedKeyed(n=8))
        waiting = asyncio.gather(running.result(), queued.result())
        await asyncio.wait_for(counters.started.wait(), DEADLINE)
        assert runner.worker.holds(running.id) and not runner.worker.holds(queued.id)
        assert runner.queue.pending_here(queued.id)
        reads = store.counts[GET]
        # Long enough for several polls at any cadence a waiting handle uses.
        await asyncio.sleep(1.2)
        assert store.counts[GET] == reads
        counters.gate.set()
        assert await asyncio.wait_for(waiting, DEADLINE) == [7, 8]
        assert store.counts[GET] == reads
        assert not runner.worker.holds(running.id)


_RUN_ON_S3 = """
import asyncio, sys
sys.path.insert(0, {here!r})
from wf_jobs import Adder
from stepstone import JobRunner

async def main() -> None:
    async with JobRunner({url!r}, jobs=[Adder], poll_interval=0.05) as runner:
        assert await (await runner.submit(Adder(a=1, b=2))).result(timeout=30) == 3

asyncio.run(main())
"""


@pytest.mark.slow
def test_a_runner_on_s3_leaves_no_client_session_open(s3_url: str) -> None:
    """``async with JobRunner("s3://...")`` closes the client it opened when
    it is left: aiohttp says nothing about an unclosed session at exit."""
    script = _RUN_ON_S3.format(here=str(Path(__file__).parent), url=s3_url)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "Unclosed" not in done.stderr, done.stderr
