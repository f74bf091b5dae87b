"""What a keyed submit asks of the store, in the order it takes there.

On S3 (moto here) a keyed submit creates its run's queue record and then
looks for an earlier outcome once: one GET, where looking before and after
the create takes two. A resubmission of a run this process saw end looks
first (one GET); of one that ended elsewhere, it answers from the outcome
and takes the record back, until the process has met enough of those to
look first again. A local store always looks first
(:mod:`stepstone.workflow.submitting`). Taking a record back races other
processes: one claimed meanwhile is cancelled, one of the key made since is
left alone.
"""

from __future__ import annotations

import asyncio

import pytest
from wf_jobs import Counters, FixedKey, GatedKeyed, Keyed
from wf_support import wait_until

from stepstone import InputMismatch, JobRunner
from stepstone.records.layout import run_id_for_key
from stepstone.runtime import Settlement, StoreQueue
from stepstone.runtime.decision import Ack
from stepstone.store import MemoryStore, ObjectStore
from stepstone.store.base import StoredObject
from stepstone.store.counting import (
    CONDITIONAL_PUT,
    DELETE,
    GET,
    HEAD,
    LIST,
    PUT,
    CountingStore,
)

DEADLINE = 10.0
RESUBMITS = 8
"""Resubmissions of runs that ended elsewhere a test makes (the process looks
first again after a few: ``LOOK_FIRST_SHARE``)."""


def taken(store: CountingStore) -> dict[str, int]:
    """The requests since the last call, by kind (the kinds not made left
    out), but for LISTs, HEADs and plain PUTs: an idle worker lists the queue
    and looks at its doorbell now and then, and an enqueue rings it (a PUT,
    at most ten a second: stepstone.runtime.store_queue.doorbell)."""
    made = {kind: n for kind, n in store.counts.items() if n and kind not in (LIST, HEAD, PUT)}
    store.reset()
    return made


async def test_on_s3_a_fresh_keyed_submit_is_one_create_and_one_look(
    s3_store: ObjectStore, counters: Counters
) -> None:
    store = CountingStore(s3_store)
    async with JobRunner(
        store, jobs=[GatedKeyed], state=[counters], concurrency=1, cancel_check=None
    ) as runner:
        running = await runner.submit(GatedKeyed(n=1))  # (holds the one slot: the next queues)
        await asyncio.wait_for(counters.started.wait(), DEADLINE)
        taken(store)
        queued = await runner.submit(GatedKeyed(n=2))
        assert taken(store) == {CONDITIONAL_PUT: 1, GET: 1}
        counters.gate.set()
        results = [running.result(timeout=DEADLINE), queued.result(timeout=DEADLINE)]
        assert await asyncio.gather(*results) == [1, 2]


async def test_on_s3_resubmitting_a_run_seen_to_end_here_is_one_look(
    s3_store: ObjectStore, counters: Counters
) -> None:
    store = CountingStore(s3_store)
    async with JobRunner(store, jobs=[Keyed], state=[counters], cancel_check=None) as runner:
        first = await runner.submit(Keyed(n=4))
        assert await first.result(timeout=DEADLINE) == 4
        taken(store)
        again = await runner.submit(Keyed(n=4))
        assert taken(store) == {GET: 1}
        assert not again.newly_submitted and await again.result(timeout=DEADLINE) == 4
    assert counters.counts["keyed"] == 1


async def test_on_s3_resubmitting_runs_that_ended_elsewhere_answers_from_them_and_runs_nothing(
    s3_store: ObjectStore, counters: Counters
) -> None:
    async with JobRunner(s3_store, jobs=[Keyed], state=[counters]) as elsewhere:
        ended = await asyncio.gather(
            *[await elsewhere.submit(Keyed(n=n)) for n in range(RESUBMITS)]
        )
        assert ended == list(range(RESUBMITS))
    store = CountingStore(s3_store)
    # An API process that never saw those runs (no worker: nothing else reads).
    api = JobRunner(store, jobs=[Keyed], state=[counters])
    costs: list[dict[str, int]] = []
    for n in range(RESUBMITS):
        again = await api.submit(Keyed(n=n))
        costs.append(taken(store))
        assert not again.newly_submitted and again.id == run_id_for_key(f"keyed:{n}")
        assert await again.result(timeout=DEADLINE) == n
        assert await api.queue.get(again.id) is None, "a record was left queued"
        taken(store)
    assert counters.counts["keyed"] == RESUBMITS, "a resubmission ran the job again"

    # Create first: each record made is taken back (its DELETE), until enough
    # resubmissions of finished runs were met; from then on each is one look.
    create_first = {CONDITIONAL_PUT: 1, GET: 1, DELETE: 1}
    switched = costs.index({GET: 1}) if {GET: 1} in costs else None
    assert switched is not None and switched >= 1, costs
    assert costs[:switched] == [create_first] * switched, costs
    assert costs[switched:] == [{GET: 1}] * (RESUBMITS - switched), costs


async def test_on_a_local_store_a_keyed_submit_looks_first(
    file_store: ObjectStore, counters: Counters
) -> None:
    store = CountingStore(file_store)
    async with JobRunner(store, jobs=[Keyed], state=[counters], cancel_check=None) as runner:
        taken(store)
        first = await runner.submit(Keyed(n=6))
        assert taken(store) == {CONDITIONAL_PUT: 1, GET: 2}  # a look before the create and after
        assert await first.result(timeout=DEADLINE) == 6
        taken(store)
        await runner.submit(Keyed(n=6))
        assert taken(store) == {GET: 1}  # a resubmission: one look, nothing written


async def test_on_s3_a_key_that_ended_elsewhere_with_another_input_raises_and_leaves_nothing(
    s3_store: ObjectStore, counters: Counters
) -> None:
    async with JobRunner(s3_store, jobs=[FixedKey, Keyed], state=[counters]) as elsewhere:
        assert await (await elsewhere.submit(FixedKey(content="alpha"))).result(DEADLINE) == "alpha"
        assert await (await elsewhere.submit(Keyed(n=1))).result(DEADLINE) == 1
    api = JobRunner(s3_store, jobs=[FixedKey, Keyed], state=[counters])  # (never saw them end)
    with pytest.raises(InputMismatch):
        await api.submit(FixedKey(content="beta"))
    # The same in a batch, beside a run that ended and a new one: each answered
    # as submit answers it, then the mismatch raised.
    with pytest.raises(InputMismatch):
        await api.submit_many([Keyed(n=1), FixedKey(content="beta"), Keyed(n=2)])
    assert counters.counts["keyed"] == 1
    assert await api.queue.get(run_id_for_key("fixed")) is None, "a record was left queued"
    assert await api.queue.get(run_id_for_key("keyed:1")) is None, "a record was left queued"
    assert await api.queue.get(run_id_for_key("keyed:2")) is not None  # (the new run waits)
    async with JobRunner(s3_store, jobs=[FixedKey, Keyed], state=[counters]) as worker:
        assert await worker.handle(run_id_for_key("keyed:2"), Keyed).result(DEADLINE) == 2
        assert await worker.handle(run_id_for_key("fixed"), FixedKey).result(DEADLINE) == "alpha"
    assert counters.counts["keyed"] == 2


class PausingStore(MemoryStore):
    """A MemoryStore that says it is remote (so keyed submits create, then
    look) and can hold reads of outcome records until told to go on: room
    for another process to act between a submit's create and its look."""

    remote = True

    def __init__(self) -> None:
        super().__init__()
        self.go = asyncio.Event()
        self.go.set()
        self.held = 0

    async def get(self, key: str) -> StoredObject:
        if key.startswith("outcomes/") and not self.go.is_set():
            self.held += 1
            await self.go.wait()
        return await super().get(key)


async def _ended_elsewhere(store: ObjectStore, counters: Counters, n: int) -> str:
    async with JobRunner(store, jobs=[Keyed], state=[counters]) as elsewhere:
        handle = await elsewhere.submit(Keyed(n=n))
        assert await handle.result(DEADLINE) == n
        return handle.id


async def test_a_record_claimed_before_the_look_is_cancelled_and_runs_nothing(
    counters: Counters,
) -> None:
    store = PausingStore()
    run_id = await _ended_elsewhere(store, counters, 1)
    api = JobRunner(store, jobs=[Keyed], state=[counters])  # (never saw it end)
    other = StoreQueue(store, prefix="queue")  # another process's worker, claiming
    store.go.clear()
    submitting = asyncio.create_task(api.submit(Keyed(n=1)))
    await wait_until(lambda: store.held == 1)  # made its record, waits on its look
    [claimed] = await other.claim(1, lease=60.0)
    assert claimed.id == run_id
    store.go.set()
    handle = await asyncio.wait_for(submitting, DEADLINE)
    assert not handle.newly_submitted and await handle.result(DEADLINE) == 1
    assert await other.settle(claimed, Ack()) is Settlement.LOST, (
        "the claimed record was not taken back"
    )
    assert await api.queue.get(run_id) is None
    assert counters.counts["keyed"] == 1


async def test_taking_back_never_removes_a_record_of_the_key_made_since(
    counters: Counters,
) -> None:
    store = PausingStore()
    run_id = await _ended_elsewhere(store, counters, 2)
    api = JobRunner(store, jobs=[Keyed], state=[counters])
    other = StoreQueue(store, prefix="queue")
    store.go.clear()
    submitting = asyncio.create_task(api.submit(Keyed(n=2)))
    await wait_until(lambda: store.held == 1)
    # Meanwhile the record goes and another of the id is made (as a
    # resubmission after a purge would make the key's next run).
    assert await other.cancel(run_id)
    assert (await other.enqueue(b"the key's next run", id=run_id)).created
    store.go.set()
    handle = await asyncio.wait_for(submitting, DEADLINE)
    assert not handle.newly_submitted and await handle.result(DEADLINE) == 2
    record = await other.get(run_id)
    assert record is not None and record.payload == b"the key's next run"
