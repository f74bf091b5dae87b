"""Outcome objects that cannot answer a run (undecodable, or another input's):
the job still ends, in bounded time, with an error that names the object, and
its handle resolves; nothing takes another run's outcome for this one's."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from wf_jobs import Adder, Counters, Keyed
from wf_support import wait_until

from stepstone import (
    CorruptOutcome,
    CorruptRecord,
    InputMismatch,
    InvalidKey,
    JobFailed,
    JobRunner,
    JobStatus,
)
from stepstone.records.codec import pack
from stepstone.records.layout import Layout
from stepstone.records.outcome import OutcomeRecord
from stepstone.runtime import MemoryQueue
from stepstone.runtime.queue import Enqueued, NewJob
from stepstone.store import MemoryStore, ObjectStore
from stepstone.store.base import ObjectInfo, StoredObject
from stepstone.testing import FakeClock

BOTH_SUBMIT_ORDERS = True  # (conftest: keyed submits also in a remote store's order)

MakeRunner = Callable[..., JobRunner]
DEADLINE = 10.0


def a_record(run_id: str) -> OutcomeRecord:
    return OutcomeRecord(
        run_id=run_id,
        kind=Keyed.NAME,
        status=JobStatus.SUCCEEDED,
        input_hash="0" * 64,
        incarnation="0" * 16,
        attempts=1,
        finished_at=0.0,
        result=pack(1),
    )


def bad_object(kind: str, run_id: str) -> bytes:
    """An object at a run's outcome key that cannot answer the run: no record
    this library reads, or a valid record of another input's run."""
    if kind == "another-input":
        return a_record(run_id).encode()
    if kind == "garbage":
        return b"\xc1 not MessagePack at all"
    if kind == "empty":
        return b""
    if kind == "truncated":
        data = a_record(run_id).encode()
        return data[: len(data) // 2]
    assert kind == "another-version"
    return pack({"v": 2, "run_id": run_id, "answer": 1})


BAD_KINDS = ["garbage", "empty", "truncated", "another-version", "another-input"]


async def assert_dead_naming(runner: JobRunner, run_id: str, key: str) -> None:
    """The run's queue record goes dead, its reason naming ``key``."""

    async def dead() -> bool:
        record = await runner.queue.get(run_id)
        return record is not None and record.status is JobStatus.DEAD

    await wait_until(dead, DEADLINE)
    record = await runner.queue.get(run_id)
    assert record is not None and record.dead_reason is not None
    assert key in record.dead_reason, record.dead_reason


@pytest.mark.parametrize("kind", BAD_KINDS)
async def test_a_job_whose_outcome_key_holds_a_bad_object_ends_unrun_and_its_handle_raises(
    make_runner: MakeRunner, counters: Counters, kind: str
) -> None:
    """Another process (an API) submitted the job; the worker finds the bad
    object before running it."""
    api = make_runner()
    handle = await api.submit(Keyed(n=1))
    key = api.layout.outcome(handle.id)
    await api.store.put(key, bad_object(kind, handle.id))
    async with make_runner(jobs=[Keyed, Adder]) as worker:
        with pytest.raises(CorruptOutcome) as raised:
            await handle.result(timeout=DEADLINE)
        assert raised.value.key == key and key in str(raised.value)
        await assert_dead_naming(api, handle.id, key)
        assert worker.worker.stats.claimed == 1, "the job was claimed again"
        assert await (await worker.submit(Adder(a=1, b=2))).result(timeout=DEADLINE) == 3
    assert counters.counts["keyed"] == 0, "the job ran though nothing it did could be recorded"


@pytest.mark.parametrize("kind", BAD_KINDS)
async def test_a_job_whose_outcome_key_goes_bad_while_it_runs_ends_and_its_handle_raises(
    make_runner: MakeRunner, counters: Counters, kind: str
) -> None:
    """The submit and the worker are one runner (the worker does not look
    before running): the bad object is met when the outcome is written."""
    runner = make_runner(jobs=[Keyed, Adder])
    handle = await runner.submit(Keyed(n=2))
    key = runner.layout.outcome(handle.id)
    await runner.store.put(key, bad_object(kind, handle.id))
    async with runner:
        with pytest.raises(CorruptOutcome) as raised:
            await handle.result(timeout=DEADLINE)
        assert raised.value.key == key
        await assert_dead_naming(runner, handle.id, key)
        assert runner.worker.stats.claimed == 1, "the job was claimed again"
        if kind != "another-input":  # (a handle made by id alone knows no input)
            # A handle made afterwards, reading the object, raises the same error.
            with pytest.raises(CorruptOutcome):
                await runner.handle(handle.id, Keyed).result(timeout=DEADLINE)
    assert counters.counts["keyed"] == 1


class RefusesOutcomeWrites(ObjectStore):
    """A store that refuses every write of an outcome record as an invalid key
    (as S3 does a key over 1,024 bytes), and passes everything else through."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.location = inner.location

    def _check(self, key: str) -> None:
        if "/outcomes/" in f"/{key}":
            raise InvalidKey("refused by the store", location=self.location, key=key)

    async def get(self, key: str) -> StoredObject:
        return await self.inner.get(key)

    async def head(self, key: str) -> ObjectInfo:
        return await self.inner.head(key)

    async def put(self, key: str, data: bytes) -> str:
        self._check(key)
        return await self.inner.put(key, data)

    async def put_if_absent(self, key: str, data: bytes) -> str:
        self._check(key)
        return await self.inner.put_if_absent(key, data)

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        self._check(key)
        return await self.inner.put_if_match(key, data, etag)

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        await self.inner.delete(key, if_match=if_match)

    async def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int = 1000
    ) -> list[ObjectInfo]:
        return await self.inner.list(prefix, start_after=start_after, limit=limit)


async def test_a_job_whose_outcome_the_store_refuses_ends_and_its_handle_raises(
    store: MemoryStore, clock: FakeClock, counters: Counters
) -> None:
    refusing = RefusesOutcomeWrites(store)
    async with JobRunner(refusing, jobs=[Adder], clock=clock, retry_backoff=0.0) as runner:
        handle = await runner.submit(Adder(a=1, b=1))
        with pytest.raises(InvalidKey, match="refused by the store"):
            await handle.result(timeout=DEADLINE)
        await assert_dead_naming(runner, handle.id, runner.layout.outcome(handle.id))
        assert runner.worker.stats.claimed == 1, "the job was claimed again"


async def test_submitting_over_a_bad_outcome_object_raises_corrupt_outcome_naming_it(
    make_runner: MakeRunner,
) -> None:
    async with make_runner(jobs=[Keyed]) as runner:
        first = await runner.submit(Keyed(n=3))
        assert await first.result(timeout=DEADLINE) == 3
        key = runner.layout.outcome(first.id)
        await runner.store.put(key, bad_object("garbage", first.id))
        with pytest.raises(CorruptOutcome, match=key):
            await runner.submit(Keyed(n=3))
        with pytest.raises(CorruptOutcome, match=key):
            await runner.submit_many([Keyed(n=3)])
        # Nothing was left to run: a record made before the look is taken back.
        assert await runner.queue.get(first.id) is None


async def test_status_and_cancel_of_a_queued_job_do_not_take_another_inputs_outcome(
    make_runner: MakeRunner,
) -> None:
    runner = make_runner()
    handle = await runner.submit(Keyed(n=4))
    key = runner.layout.outcome(handle.id)
    await runner.store.put(key, bad_object("another-input", handle.id))
    state = await handle.status()
    assert state is not None and state.status is JobStatus.READY, state
    assert state.last_error is not None and key in state.last_error
    with pytest.raises(CorruptOutcome, match=key):
        await handle.cancel()


class FinishesAnotherInputFirst(MemoryQueue):
    """A queue on which the previous run of a key, of another input, ends
    just before each enqueue (its outcome written, its record acked): the
    race between a submit's first look and its enqueue."""

    def __init__(self, store: MemoryStore, runner_layout: Layout, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.store = store
        self.runner_layout = runner_layout

    async def enqueue_many(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        for job in jobs:
            assert job.id is not None
            await self.store.put(self.runner_layout.outcome(job.id), a_record(job.id).encode())
        return await super().enqueue_many(jobs)


async def test_a_submit_that_loses_the_race_to_another_input_leaves_no_record_behind(
    store: MemoryStore, clock: FakeClock
) -> None:
    queue = FinishesAnotherInputFirst(store, Layout(), clock)
    runner = JobRunner(store, queue=queue, clock=clock)
    with pytest.raises(InputMismatch):
        await runner.submit(Keyed(n=5))
    assert (await queue.list()).records == [], "the record made for the refused submit stayed"


async def test_a_handle_elsewhere_resolves_when_the_outcome_could_not_be_recorded(
    store: MemoryStore, clock: FakeClock
) -> None:
    """The worker's store refuses the outcome write; a handle in another
    process (here, another runner) hears it from the dead queue record."""
    api = JobRunner(store, clock=clock)
    handle = await api.submit(Adder(a=2, b=2))
    refusing = RefusesOutcomeWrites(store)
    async with JobRunner(refusing, jobs=[Adder], clock=clock, retry_backoff=0.0):
        with pytest.raises(JobFailed) as failed:
            await handle.result(timeout=DEADLINE)
    assert "result not recorded: InvalidKey: refused by the store" in failed.value.message


async def test_a_handle_on_a_job_whose_queue_record_went_bad_raises_corrupt_record(
    store: MemoryStore, clock: FakeClock
) -> None:
    api = JobRunner(store, clock=clock)
    handle = await api.submit(Adder(a=3, b=3))
    key = f"queue/jobs/{handle.id}"
    await store.get(key)  # (where the StoreQueue keeps it)
    await store.put(key, b"\xc1 not a queue record")
    with pytest.raises(CorruptRecord, match=key):
        await handle.result(timeout=DEADLINE)
