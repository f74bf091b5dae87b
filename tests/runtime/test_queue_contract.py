"""The LeaseQueue contract, once, against every backend.

Each test runs on MemoryQueue, on StoreQueue over a MemoryStore, a FileStore,
a SqliteStore and S3 (moto), and on SqsQueue over moto's SQS except where ``SQS_CANNOT``
says why not. Time is a FakeClock throughout: nothing sleeps. The inspection
section checks the capabilities of stepstone.runtime.capabilities on the backends
that offer them. The last section runs two StoreQueue instances on one
store, standing in for two processes: each has its own record cache and learns the
other's work only through the store.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from stepstone.runtime import (
    ClaimedEnqueue,
    DeadJobRequeue,
    Delivery,
    Enqueued,
    FakeClock,
    IdleHints,
    JobCounts,
    JobListing,
    JobStatus,
    LeaseQueue,
    MemoryQueue,
    NewJob,
    PayloadTooLarge,
    PendingHere,
    QueueInspection,
    Settlement,
    Wait,
    Waking,
    Withdrawing,
)
from stepstone.runtime.decision import Ack, Dead, Release, Retry, Suspended
from stepstone.runtime.fairness import bucket_of, fairness_headers
from stepstone.runtime.queue import DEFAULT_MAX_ATTEMPTS
from stepstone.runtime.status import QUEUE_STATUSES
from stepstone.runtime.store_queue import StoreQueue
from stepstone.store import MemoryStore, ObjectStore

LEASE = 30.0
T = TypeVar("T")


@dataclass
class Backend:
    """Makes queues of one kind that share a clock and, for StoreQueue, a store
    (for SqsQueue, the SQS queues and the S3 id store)."""

    name: str
    clock: FakeClock
    store: ObjectStore | None
    sqs: dict[str, Any] | None = None

    def make(self, **options: Any) -> LeaseQueue:
        queue: LeaseQueue
        if self.sqs is not None:
            from stepstone.runtime.sqs import SqsQueue

            options.pop("priority_aging", None)
            return SqsQueue(
                self.sqs["name"],
                id_store=self.store,
                endpoint_url=self.sqs["endpoint"],
                region="us-east-1",
                clock=self.clock,
                wait_time_seconds=0,
                **options,
            )
        if self.store is None:
            queue = MemoryQueue(clock=self.clock, **options)
        else:
            # scan_interval=0: the tests check what a process can see, not
            # how often it looks (test_store_queue.py covers that).
            options.setdefault("scan_interval", 0.0)
            queue = StoreQueue(self.store, clock=self.clock, **options)
        return queue


BACKENDS = [
    "memory_queue",
    "store_memory",
    "store_file",
    "store_sqlite",
    "store_s3",
    "store_real_s3",
    "sqs",
]

_REAL_TIME = (
    "leases and delays are SQS visibility timeouts and DelaySeconds, in real time, and "
    "this suite moves a FakeClock (test_sqs_queue.py checks the same in real time)"
)
_FENCED_SHORT = (
    "the lease an SqsQueue grants is fenced fence_margin short of SQS's visibility "
    "timeout, so expiries are not now + lease exactly"
)
_SQS_FAIR = (
    "SQS cannot reorder a queue: a fairness key is sent as the message's MessageGroupId, "
    "for SQS's fair queues to order (test_sqs_fairness.py)"
)
SQS_CANNOT: dict[str, str] = {
    "test_next_due_is_the_earliest_run_at_or_lease_expiry": (
        "SQS cannot say when a delayed or invisible message comes back (next_due is None)"
    ),
    "test_a_job_is_not_claimed_before_its_run_at": (
        "it asserts next_due, which SQS cannot answer "
        "(test_sqs_queue.py::test_run_at_beyond_the_delay_cap_is_re_deferred checks run-at)"
    ),
    "test_priority_ages_so_an_old_low_job_beats_a_new_high_one": (
        "priorities are SQS queues polled by weight (4:2:1); waiting jobs do not age"
    ),
    "test_claim_takes_n_in_priority_order_then_due_order": _FENCED_SHORT,
    "test_renew_extends_and_never_shortens": _FENCED_SHORT,
    "test_a_lapsed_lease_is_reclaimed_and_the_old_token_is_fenced_off": _REAL_TIME,
    "test_a_takeover_of_the_last_attempt_counts_lapses_not_attempts": _REAL_TIME,
    "test_nack_retries_after_the_delay_counting_the_attempt": _REAL_TIME,
    "test_fairness_keys_are_served_round_robin_among_ready_jobs_of_one_priority": _SQS_FAIR,
    "test_fairness_weights_set_each_keys_share_of_claims": _SQS_FAIR,
    "test_priority_goes_before_fairness": _SQS_FAIR,
    "test_a_key_that_went_idle_comes_back_where_it_left_off": _SQS_FAIR,
    "test_an_uncounted_nack_hands_the_attempt_back": _REAL_TIME,
}
"""Contract cases SqsQueue cannot hold, each with the reason (docs/scaling.md
says the same to users). Everything else in this module runs on moto's SQS,
but for the inspection it does not offer (``requires``)."""


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    clock = FakeClock()
    store: ObjectStore | None = None
    if request.param == "sqs":
        reason = SQS_CANNOT.get(request.node.originalname)
        if reason is not None:
            pytest.skip(f"SQS: {reason}")
        endpoint = request.getfixturevalue("moto_server")
        name = f"c-{uuid.uuid4().hex[:16]}"
        asyncio.run(_create_sqs_queues(name, endpoint))
        return Backend(request.param, clock, MemoryStore(), {"name": name, "endpoint": endpoint})
    if request.param != "memory_queue":
        store = request.getfixturevalue(request.param.removeprefix("store_") + "_store")
    return Backend(request.param, clock, store)


async def _create_sqs_queues(name: str, endpoint: str) -> None:
    from stepstone.runtime.sqs import SqsQueue

    made = await SqsQueue.create(
        name, id_store=None, endpoint_url=endpoint, region="us-east-1", wait_time_seconds=0
    )
    await made.close()


@pytest.fixture
def queue(backend: Backend) -> LeaseQueue:
    return backend.make(max_payload_bytes=1024)


@pytest.fixture
def clock(backend: Backend) -> FakeClock:
    return backend.clock


async def claim_one(queue: LeaseQueue, **kw: Any) -> Delivery:
    got = await queue.claim(1, lease=kw.pop("lease", LEASE), **kw)
    assert len(got) == 1, got
    return got[0]


# -- enqueue ---------------------------------------------------------------


async def test_enqueue_returns_an_id_and_the_record_is_ready(
    queue: LeaseQueue, clock: FakeClock
) -> None:
    made = await queue.enqueue(b"hello", kind="greet", headers={"trace": "t1"}, priority=3)
    assert made.created and made.id
    record = await queue.get(made.id)
    assert record is not None
    assert (record.status, record.kind, record.payload) == (JobStatus.READY, "greet", b"hello")
    assert (record.priority, record.attempts, dict(record.headers)) == (3, 0, {"trace": "t1"})
    assert record.run_at == record.created_at == clock.now()


async def test_enqueue_with_a_live_id_is_deduplicated(queue: LeaseQueue) -> None:
    first = await queue.enqueue(b"one", id="job-1")
    second = await queue.enqueue(b"two", id="job-1")
    assert (first.id, first.created) == ("job-1", True)
    assert (second.id, second.created) == ("job-1", False)
    record = await queue.get("job-1")
    assert record is not None and record.payload == b"one"
    # Still a duplicate while claimed; a new job once acked.
    d = await claim_one(queue)
    assert not (await queue.enqueue(b"three", id="job-1")).created
    assert await queue.settle(d, Ack()) is Settlement.ACKED
    assert (await queue.enqueue(b"four", id="job-1")).created


async def test_enqueue_many_answers_each_job_in_order(queue: LeaseQueue) -> None:
    await queue.enqueue(b"live", id="live")
    made = await queue.enqueue_many(
        [
            NewJob(b"one", kind="k", id="many-1", priority=2),
            NewJob(b"again", id="live"),
            NewJob(b"fresh"),
            NewJob(b"first", id="twice"),
            NewJob(b"second", id="twice"),  # one id's jobs in order: the first creates it
        ]
    )
    assert [(m.id, m.created) for m in made if m.id != made[2].id] == [
        ("many-1", True),
        ("live", False),
        ("twice", True),
        ("twice", False),
    ]
    assert made[2].created and made[2].id
    payloads = {m.id: (await queue.get(m.id)) for m in made}
    assert {i: r.payload for i, r in payloads.items() if r is not None} == {
        "many-1": b"one",
        "live": b"live",
        made[2].id: b"fresh",
        "twice": b"first",
    }
    record = payloads["many-1"]
    assert record is not None and (record.kind, record.priority) == ("k", 2)
    assert await queue.enqueue_many([]) == []


@pytest.mark.parametrize("bad", ["", "a/b", "../x", "sp ace", ".", "x" * 201, "é"])
async def test_an_id_that_no_backend_can_hold_is_refused(queue: LeaseQueue, bad: str) -> None:
    with pytest.raises(ValueError, match="invalid run id"):
        await queue.enqueue(b"", id=bad)
    assert await queue.claim(1, lease=LEASE) == []


async def test_a_payload_over_the_limit_is_refused_and_nothing_is_enqueued(
    queue: LeaseQueue,
) -> None:
    await queue.enqueue(b"x" * 1024, id="at-limit")
    with pytest.raises(PayloadTooLarge, match="1025 bytes"):
        await queue.enqueue(b"x" * 1025, id="over-limit")
    assert await queue.get("over-limit") is None
    assert [d.id for d in await queue.claim(5, lease=LEASE)] == ["at-limit"]


async def test_subscribe_fires_on_enqueue_until_unsubscribed(queue: LeaseQueue) -> None:
    calls: list[str] = []
    unsubscribe = requires(IdleHints, queue).subscribe(lambda: calls.append("wake"))
    await queue.enqueue(b"a")
    assert calls == ["wake"]
    await queue.enqueue(b"a", id="dup")
    await queue.enqueue(b"a", id="dup")  # a duplicate makes nothing new available
    assert calls == ["wake", "wake"]
    d = await claim_one(queue)
    await queue.settle(d, Release())
    assert len(calls) == 3
    unsubscribe()
    await queue.enqueue(b"b")
    assert len(calls) == 3


# -- claim -----------------------------------------------------------------


async def test_claim_takes_n_in_priority_order_then_due_order(
    queue: LeaseQueue, clock: FakeClock
) -> None:
    await queue.enqueue(b"", id="normal-early", priority=5)
    clock.advance(1)
    await queue.enqueue(b"", id="normal-late", priority=5)
    await queue.enqueue(b"", id="high", priority=0)
    await queue.enqueue(b"", id="low", priority=9)
    first = await queue.claim(2, lease=LEASE)
    assert [d.id for d in first] == ["high", "normal-early"]
    assert all(d.attempt == 1 and d.claims == 1 for d in first)
    assert all(d.lease_expires_at == clock.now() + LEASE for d in first)
    rest = await queue.claim(5, lease=LEASE)
    assert [d.id for d in rest] == ["normal-late", "low"]
    assert await queue.claim(5, lease=LEASE) == []
    assert len({d.token for d in first + rest}) == 4


async def test_claim_hands_over_what_was_enqueued(queue: LeaseQueue, clock: FakeClock) -> None:
    made = await queue.enqueue(b"body", kind="k", id="j", priority=2, headers={"h": "v"})
    d = await claim_one(queue)
    assert (d.id, d.kind, d.payload, d.priority, dict(d.headers)) == (
        "j",
        "k",
        b"body",
        2,
        {"h": "v"},
    )
    assert (d.attempt, d.max_attempts, d.enqueued_at) == (1, DEFAULT_MAX_ATTEMPTS, clock.now())
    assert made.id == d.id
    record = await queue.get("j")
    assert record is not None and record.status is JobStatus.RUNNING
    assert record.lease_expires_at == d.lease_expires_at


async def test_enqueue_claimed_hands_over_the_job_held_or_enqueues_it(
    queue: LeaseQueue, clock: FakeClock, backend: Backend
) -> None:
    """A queue that can writes the record claimed: the delivery is the
    caller's, and no claim gets the job while its lease runs. A live id is
    refused, and a job due later is enqueued to wait for its time."""
    claiming = requires(ClaimedEnqueue, queue)
    job = NewJob(b"body", kind="k", id="j", priority=2, headers={"h": "v"})
    enqueued, d = await claiming.enqueue_claimed(job, lease=30)
    assert enqueued == Enqueued("j", created=True)
    assert d is not None
    assert await queue.claim(5, lease=30) == []
    assert d.lease_expires_at == clock.now() + 30
    record = await queue.get("j")
    assert record is not None and record.status is JobStatus.RUNNING
    assert (d.id, d.kind, d.payload, d.priority, dict(d.headers)) == (
        "j",
        "k",
        b"body",
        2,
        {"h": "v"},
    )
    assert (d.attempt, d.claims, d.enqueued_at) == (1, 1, clock.now())
    assert await claiming.enqueue_claimed(NewJob(b"other", id="j"), lease=30) == (
        Enqueued("j", created=False),
        None,
    )
    assert await queue.settle(d, Ack()) is Settlement.ACKED
    later, none = await claiming.enqueue_claimed(
        NewJob(b"", id="l", run_at=clock.now() + 60), lease=30
    )
    assert later.created and none is None
    assert await queue.claim(5, lease=30) == []


async def test_a_job_is_not_claimed_before_its_run_at(queue: LeaseQueue, clock: FakeClock) -> None:
    await queue.enqueue(b"", id="later", run_at=clock.now() + 100)
    assert await queue.claim(1, lease=LEASE) == []
    record = await queue.get("later")
    assert record is not None and record.status is JobStatus.SCHEDULED
    assert await requires(IdleHints, queue).next_due() == clock.now() + 100
    clock.advance(99.5)
    assert await queue.claim(1, lease=LEASE) == []
    clock.advance(0.5)
    assert [d.id for d in await queue.claim(1, lease=LEASE)] == ["later"]


async def test_claim_filters_by_kind(queue: LeaseQueue) -> None:
    await queue.enqueue(b"", id="a1", kind="a", priority=0)
    await queue.enqueue(b"", id="b1", kind="b", priority=9)
    await queue.enqueue(b"", id="c1", kind="c", priority=5)
    assert [d.id for d in await queue.claim(5, lease=LEASE, kinds=["b"])] == ["b1"]
    assert [d.id for d in await queue.claim(5, lease=LEASE, kinds={"a", "c"})] == ["a1", "c1"]


async def test_priority_ages_so_an_old_low_job_beats_a_new_high_one(
    clock: FakeClock, backend: Backend
) -> None:
    queue = backend.make(priority_aging=10.0)
    await queue.enqueue(b"", id="old-low", priority=9)
    clock.advance(89)  # 9 levels * 10 s = 90 s: not yet aged enough
    await queue.enqueue(b"", id="new-high-1", priority=0)
    assert (await claim_one(queue)).id == "new-high-1"
    clock.advance(2)  # now the low job has waited 91 s
    await queue.enqueue(b"", id="new-high-2", priority=0)
    assert [d.id for d in await queue.claim(2, lease=LEASE)] == ["old-low", "new-high-2"]


# -- fairness between tenants -----------------------------------------------


def tenant(key: str, weight: int | None = None) -> dict[str, str]:
    """The headers a submit with this fairness key (and weight) enqueues with."""
    return fairness_headers(key, weight)


async def claim_ids(queue: LeaseQueue, count: int) -> list[str]:
    """``count`` claims of one job each (fewer if the queue runs dry), in order."""
    out: list[str] = []
    for _ in range(count):
        got = await queue.claim(1, lease=LEASE)
        if not got:
            break
        out.append(got[0].id)
    return out


async def test_fairness_keys_are_served_round_robin_among_ready_jobs_of_one_priority(
    queue: LeaseQueue, clock: FakeClock
) -> None:
    """One tenant's backlog, queued first, does not hold another's jobs
    back: the keys are served round-robin, each giving its first job in line;
    the jobs without a key are served as one key."""
    for i in range(6):
        await queue.enqueue(b"", id=f"a{i}", headers=tenant("tenant-a"))
        clock.advance(0.01)
    for i in range(2):
        await queue.enqueue(b"", id=f"b{i}", headers=tenant("tenant-b"))
        clock.advance(0.01)
    await queue.enqueue(b"", id="plain")
    assert await claim_ids(queue, 9) == ["a0", "b0", "plain", "a1", "b1"] + [
        f"a{i}" for i in range(2, 6)
    ]


async def test_fairness_weights_set_each_keys_share_of_claims(
    queue: LeaseQueue, clock: FakeClock
) -> None:
    for i in range(6):
        await queue.enqueue(b"", id=f"a{i}", headers=tenant("tenant-a"))
        await queue.enqueue(b"", id=f"c{i}", headers=tenant("tenant-c", 2))
        clock.advance(0.01)
    claimed = await claim_ids(queue, 9)
    assert [c[0] for c in claimed] == list("accaccacc")
    assert claimed[:3] == ["a0", "c0", "c1"]  # each key's own jobs in line order


async def test_priority_goes_before_fairness(queue: LeaseQueue, clock: FakeClock) -> None:
    """Fairness orders the jobs of one priority; the line still decides
    which priority is served (and aging still applies)."""
    for i in range(3):
        await queue.enqueue(b"", id=f"a{i}", priority=0, headers=tenant("tenant-a"))
    await queue.enqueue(b"", id="b0", priority=5, headers=tenant("tenant-b"))
    await queue.enqueue(b"", id="b1", priority=0, headers=tenant("tenant-b"))
    clock.advance(1)
    assert await claim_ids(queue, 5) == ["a0", "b1", "a1", "a2", "b0"]


async def test_a_key_that_went_idle_comes_back_where_it_left_off(
    queue: LeaseQueue, clock: FakeClock
) -> None:
    """A key gains no credit while it has nothing ready: it is served once
    in its round again, not several times to make up for the time it was idle."""
    await queue.enqueue(b"", id="b0", headers=tenant("tenant-b"))
    for i in range(4):
        await queue.enqueue(b"", id=f"a{i}", headers=tenant("tenant-a"))
    clock.advance(0.01)
    assert await claim_ids(queue, 3) == ["b0", "a0", "a1"]
    for i in range(1, 4):
        await queue.enqueue(b"", id=f"b{i}", headers=tenant("tenant-b"))
    clock.advance(0.01)
    assert await claim_ids(queue, 4) == ["b1", "a2", "b2", "a3"]


# -- leases and fencing ----------------------------------------------------


async def test_a_lapsed_lease_is_reclaimed_and_the_old_token_is_fenced_off(
    queue: LeaseQueue, clock: FakeClock
) -> None:
    await queue.enqueue(b"p", id="j")
    old = await claim_one(queue, lease=10)
    clock.advance(9)
    assert await queue.claim(1, lease=10) == []  # not lapsed yet
    assert await requires(IdleHints, queue).next_due() == old.lease_expires_at
    clock.advance(1)
    new = await claim_one(queue, lease=10)
    # A takeover: a lapse counted, the attempt the lapsed claim began goes on.
    assert (new.id, new.attempt, new.claims, new.lapses) == ("j", 1, 2, 1)
    assert new.token != old.token
    assert new.payload == b"p"
    before = await queue.get("j")
    assert await queue.renew(old, 100) is None
    assert await queue.settle(old, Ack()) is Settlement.LOST
    assert await queue.settle(old, Retry(0)) is Settlement.LOST
    assert await queue.settle(old, Retry(0, count=False)) is Settlement.LOST
    assert await queue.settle(old, Dead("stale")) is Settlement.LOST
    assert await queue.settle(old, Release()) is Settlement.LOST
    assert await queue.get("j") == before
    assert await queue.settle(new, Ack()) is Settlement.ACKED


async def test_a_takeover_of_the_last_attempt_counts_lapses_not_attempts(
    backend: Backend, clock: FakeClock
) -> None:
    """A worker that dies costs its run no attempt; the queue counts the
    lapses, and the worker, not the queue, ends a run that has too many
    (docs/architecture.md)."""
    queue = backend.make()
    await queue.enqueue(b"", id="j", max_attempts=1)
    await claim_one(queue, lease=1)
    for lapses in (1, 2, 3):
        clock.advance(2)
        again = await claim_one(queue, lease=1)
        assert (again.attempt, again.max_attempts, again.lapses) == (1, 1, lapses)
        record = await queue.get("j")
        assert record is not None and (record.attempts, record.lapses) == (1, lapses)
    # A failure then is the last attempt's: the run dies, its lapses kept.
    assert await queue.settle(again, Retry(0, error="boom")) is Settlement.DEAD


async def test_renew_extends_and_never_shortens(queue: LeaseQueue, clock: FakeClock) -> None:
    await queue.enqueue(b"", id="j")
    d = await claim_one(queue, lease=10)
    assert await queue.renew(d, 60) == clock.now() + 60
    assert await queue.renew(d, 5) == clock.now() + 60
    clock.advance(50)
    assert await queue.claim(1, lease=10) == []  # the original lease would have lapsed
    assert await queue.renew(d, 30) == clock.now() + 30
    record = await queue.get("j")
    assert record is not None and record.lease_expires_at == clock.now() + 30
    assert await queue.settle(d, Ack()) is Settlement.ACKED


async def test_a_lapsed_lease_not_yet_taken_over_can_still_settle(
    queue: LeaseQueue, clock: FakeClock
) -> None:
    await queue.enqueue(b"", id="j")
    d = await claim_one(queue, lease=10)
    clock.advance(20)
    assert await queue.settle(d, Ack()) is Settlement.ACKED


# -- settlements -----------------------------------------------------------


async def test_ack_removes_the_job(queue: LeaseQueue) -> None:
    await queue.enqueue(b"", id="j")
    d = await claim_one(queue)
    assert await queue.settle(d, Ack()) is Settlement.ACKED
    assert await queue.get("j") is None
    assert await queue.settle(d, Ack()) is Settlement.LOST
    assert await queue.claim(1, lease=LEASE) == []


async def test_nack_retries_after_the_delay_counting_the_attempt(
    queue: LeaseQueue, clock: FakeClock
) -> None:
    await queue.enqueue(b"", id="j")
    d = await claim_one(queue)
    assert await queue.settle(d, Retry(10, error="boom")) is Settlement.RETRIED
    record = await queue.get("j")
    assert record is not None
    assert (record.status, record.attempts, record.last_error) == (JobStatus.SCHEDULED, 1, "boom")
    assert record.run_at == clock.now() + 10
    assert await requires(IdleHints, queue).next_due() == clock.now() + 10
    assert await queue.claim(1, lease=LEASE) == []
    clock.advance(10)
    again = await claim_one(queue)
    assert (again.attempt, again.claims) == (2, 2)
    assert await queue.settle(d, Ack()) is Settlement.LOST


async def test_an_uncounted_nack_hands_the_attempt_back(
    queue: LeaseQueue, clock: FakeClock
) -> None:
    await queue.enqueue(b"", id="j", max_attempts=1)
    d = await claim_one(queue)
    assert await queue.settle(d, Retry(5, count=False)) is Settlement.RETRIED
    clock.advance(5)
    again = await claim_one(queue)
    assert (again.attempt, again.claims) == (1, 2)


async def test_a_counted_nack_on_the_last_attempt_is_dead(queue: LeaseQueue) -> None:
    await queue.enqueue(b"", id="j", max_attempts=2)
    d1 = await claim_one(queue)
    assert await queue.settle(d1, Retry(0, error="first")) is Settlement.RETRIED
    d2 = await claim_one(queue)
    assert d2.attempt == 2
    assert await queue.settle(d2, Retry(0, error="second")) is Settlement.DEAD
    record = await queue.get("j")
    assert record is not None
    assert (record.status, record.attempts, record.last_error) == (JobStatus.DEAD, 2, "second")
    assert record.dead_reason == "second"
    assert record.lease_expires_at is None
    assert await queue.claim(1, lease=LEASE) == []


async def test_dead_letter_records_the_reason(queue: LeaseQueue) -> None:
    await queue.enqueue(b"", id="j")
    d = await claim_one(queue)
    assert await queue.settle(d, Dead("bad input")) is Settlement.DEAD
    record = await queue.get("j")
    assert record is not None
    assert (record.status, record.dead_reason) == (JobStatus.DEAD, "bad input")
    assert await queue.claim(1, lease=LEASE) == []
    assert await queue.settle(d, Ack()) is Settlement.LOST
    assert not (await queue.enqueue(b"", id="j")).created  # a dead id is still taken


async def test_release_gives_the_job_back_at_once_uncounted(
    queue: LeaseQueue, clock: FakeClock
) -> None:
    await queue.enqueue(b"", id="j", run_at=clock.now())
    d = await claim_one(queue)
    clock.advance(3)
    assert await queue.settle(d, Release()) is Settlement.RELEASED
    record = await queue.get("j")
    assert record is not None and (record.status, record.attempts) == (JobStatus.READY, 0)
    again = await claim_one(queue)
    assert (again.attempt, again.claims) == (1, 2)
    assert await queue.settle(d, Release()) is Settlement.LOST


async def test_release_of_a_retry_makes_it_due_now(queue: LeaseQueue, clock: FakeClock) -> None:
    await queue.enqueue(b"", id="j")
    d = await claim_one(queue)
    await queue.settle(d, Retry(0))
    d = await claim_one(queue)
    await queue.settle(d, Release())
    assert (await claim_one(queue)).attempt == 2


# -- cancel and get --------------------------------------------------------


async def test_cancel_removes_a_job_in_any_state(queue: LeaseQueue, clock: FakeClock) -> None:
    await queue.enqueue(b"", id="ready")
    await queue.enqueue(b"", id="scheduled", run_at=clock.now() + 60)
    await queue.enqueue(b"", id="dead")
    d = await claim_one(queue, kinds=[""])
    await queue.settle(d, Dead("x"))
    for job_id in ("ready", "scheduled", "dead"):
        assert await queue.cancel(job_id) is True, job_id
        assert await queue.get(job_id) is None
    assert await queue.cancel("ready") is False
    assert await queue.cancel("never") is False


async def test_discard_dead_removes_a_dead_record_and_nothing_live(queue: LeaseQueue) -> None:
    """What retention and purge do to a swept run's dead record: its id is free again."""
    await queue.enqueue(b"", id="dead")
    await queue.settle(await claim_one(queue), Dead("x"))
    await queue.enqueue(b"", id="held")
    held = await claim_one(queue)
    await queue.enqueue(b"", id="ready")
    for live in ("held", "ready", "never"):
        assert await queue.discard_dead(live) is False, live
    assert await queue.discard_dead("dead") is True
    assert await queue.get("dead") is None
    assert await queue.discard_dead("dead") is False
    assert (await queue.enqueue(b"again", id="dead")).created
    assert await queue.settle(held, Ack()) is Settlement.ACKED
    ready = await queue.get("ready")
    assert ready is not None and ready.status is JobStatus.READY


async def test_cancelling_a_claimed_job_fences_off_its_holder(queue: LeaseQueue) -> None:
    await queue.enqueue(b"", id="j")
    d = await claim_one(queue)
    assert await queue.cancel("j") is True
    assert await queue.renew(d, 100) is None
    assert await queue.settle(d, Ack()) is Settlement.LOST
    assert await queue.settle(d, Retry(1)) is Settlement.LOST
    assert await queue.get("j") is None


async def test_withdraw_removes_the_record_its_enqueue_made_if_unchanged(
    queue: LeaseQueue,
) -> None:
    """What a submit does with a record it made for a key whose run had
    already ended: gone if nothing touched it; left alone once claimed, or
    once the id holds a record made since."""
    withdrawing = requires(Withdrawing, queue)
    made = await queue.enqueue(b"mine", id="unclaimed")
    assert made.created and await withdrawing.withdraw(made) is True
    assert await queue.get("unclaimed") is None
    assert await withdrawing.withdraw(made) is False  # (gone already)

    claimed = await queue.enqueue(b"mine", id="claimed")
    d = await claim_one(queue)
    assert await withdrawing.withdraw(claimed) is False
    assert await queue.settle(d, Ack()) is Settlement.ACKED

    first = await queue.enqueue(b"first", id="again")
    assert await queue.cancel("again") is True
    second = await queue.enqueue(b"second", id="again")
    assert await withdrawing.withdraw(first) is False
    record = await queue.get("again")
    assert record is not None and record.payload == b"second"

    duplicate = await queue.enqueue(b"other", id="again")
    assert not duplicate.created and await withdrawing.withdraw(duplicate) is False
    assert await withdrawing.withdraw(second) is True


async def test_get_of_an_unknown_id_is_none(queue: LeaseQueue) -> None:
    assert await queue.get("nope") is None


# -- inspection (stepstone.runtime.capabilities), where a backend offers it ------

NOT_OFFERED = {
    JobListing: "SQS has no listing of messages",
    ClaimedEnqueue: "SQS cannot send a message already received (the hand-off enqueues it)",
    Withdrawing: (
        "a sent message cannot be taken back by its sender (the submit then cancels it, "
        "which SqsQueue does as far as it can)"
    ),
    Waking: (
        "SQS cannot change a message it does not hold, so nothing can make a waiting "
        "job due early; its suspend is the default uncounted nack, and the workflow "
        "layer has waiting runs look again every wait_recheck seconds instead"
    ),
}
"""Why a backend lacks a capability, for the skip message."""


def requires(capability: type[T], queue: LeaseQueue) -> T:
    """``queue`` as ``capability``; the test is skipped, saying why, on a
    backend that does not offer it."""
    if not isinstance(queue, capability):
        why = NOT_OFFERED.get(capability, "it does not offer it")
        pytest.skip(f"{type(queue).__name__} has no {capability.__name__}: {why}")
    return queue


def test_each_backend_offers_the_inspection_it_can(backend: Backend) -> None:
    queue = backend.make()
    if backend.sqs is not None:
        assert all(isinstance(queue, c) for c in (JobCounts, DeadJobRequeue, IdleHints))
        missing = (JobListing, ClaimedEnqueue, Withdrawing, PendingHere)
        assert not any(isinstance(queue, c) for c in missing)
    else:
        offered = (QueueInspection, ClaimedEnqueue, Withdrawing, IdleHints, PendingHere)
        assert all(isinstance(queue, c) for c in offered)


async def test_requeue_brings_a_dead_job_back_with_attempts_reset(
    queue: LeaseQueue, clock: FakeClock
) -> None:
    requeue = requires(DeadJobRequeue, queue)
    await queue.enqueue(b"p", id="j", max_attempts=1)
    await queue.enqueue(b"", id="live")
    d = await claim_one(queue, kinds=[""])
    assert d.id == "j"
    assert await queue.settle(d, Retry(0, error="e")) is Settlement.DEAD
    assert await requeue.requeue("live") is False
    assert await requeue.requeue("never") is False
    clock.advance(5)
    assert await requeue.requeue("j") is True
    record = await queue.get("j")
    assert record is not None
    assert (record.status, record.attempts, record.dead_reason) == (JobStatus.READY, 0, None)
    assert record.run_at == clock.now()
    assert await queue.cancel("live")
    again = await claim_one(queue)
    assert (again.id, again.attempt, again.payload) == ("j", 1, b"p")
    assert await requeue.requeue("j") is False


async def test_list_pages_by_status_in_id_order(queue: LeaseQueue, clock: FakeClock) -> None:
    listing = requires(JobListing, queue)
    for i in range(7):
        await queue.enqueue(b"", id=f"j{i}", priority=i)
    await queue.enqueue(b"", id="s", run_at=clock.now() + 60)
    d0 = await claim_one(queue)  # j0
    d1 = await claim_one(queue)  # j1
    await queue.settle(d1, Dead("x"))
    assert d0.id == "j0"

    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = await listing.list(cursor=cursor, limit=3)
        pages += 1
        assert len(page.records) <= 3
        seen += [r.id for r in page.records]
        if page.cursor is None:
            break
        cursor = page.cursor
    assert seen == ["j0", "j1", "j2", "j3", "j4", "j5", "j6", "s"]
    assert pages == 3

    ready = await listing.list(JobStatus.READY, limit=2)
    assert [r.id for r in ready.records] == ["j2", "j3"]
    assert ready.cursor is not None
    rest = await listing.list(JobStatus.READY, cursor=ready.cursor, limit=10)
    assert [r.id for r in rest.records] == ["j4", "j5", "j6"]
    assert rest.cursor is None
    by = {s: [r.id for r in (await listing.list(s)).records] for s in QUEUE_STATUSES}
    assert by[JobStatus.RUNNING] == ["j0"]
    assert by[JobStatus.DEAD] == ["j1"]
    assert by[JobStatus.SCHEDULED] == ["s"]


async def test_counts_by_status(queue: LeaseQueue, clock: FakeClock) -> None:
    counting = requires(JobCounts, queue)
    assert await counting.counts() == dict.fromkeys(QUEUE_STATUSES, 0)
    for i in range(7):
        await queue.enqueue(b"", id=f"j{i}", priority=i)
    await queue.enqueue(b"", id="s", run_at=clock.now() + 60)
    await claim_one(queue)
    await queue.settle(await claim_one(queue), Dead("x"))
    assert await counting.counts() == {
        **dict.fromkeys(QUEUE_STATUSES, 0),
        JobStatus.READY: 5,
        JobStatus.RUNNING: 1,
        JobStatus.DEAD: 1,
        JobStatus.SCHEDULED: 1,
    }


async def test_an_empty_queue_lists_nothing(queue: LeaseQueue) -> None:
    listing = requires(JobListing, queue)
    assert (await listing.list()).records == []
    assert (await listing.list()).cursor is None


async def test_next_due_is_the_earliest_run_at_or_lease_expiry(
    queue: LeaseQueue, clock: FakeClock
) -> None:
    assert await requires(IdleHints, queue).next_due() is None
    await queue.enqueue(b"", id="later", run_at=clock.now() + 100)
    assert await requires(IdleHints, queue).next_due() == clock.now() + 100
    await queue.enqueue(b"", id="now")
    d = await claim_one(queue, lease=40)
    assert await requires(IdleHints, queue).next_due() == clock.now() + 40
    await queue.settle(d, Ack())
    assert await requires(IdleHints, queue).next_due() == clock.now() + 100


# -- suspend and wake (stepstone.runtime.capabilities.Waking), where a backend offers them ----

SLEEPING = Wait(JobStatus.SLEEPING, "until noon")


async def test_a_suspended_job_shows_its_wait_and_is_due_at_until_uncounted(
    queue: LeaseQueue, clock: FakeClock
) -> None:
    requires(Waking, queue)
    await queue.enqueue(b"p", id="j", max_attempts=1)
    d = await claim_one(queue)
    assert await queue.settle(d, Suspended(clock.now() + 100, SLEEPING)) is Settlement.SUSPENDED
    record = await queue.get("j")
    assert record is not None
    assert (record.status, record.wait, record.attempts) == (JobStatus.SLEEPING, SLEEPING, 0)
    assert record.run_at == clock.now() + 100 and record.lease_expires_at is None
    assert await requires(IdleHints, queue).next_due() == clock.now() + 100
    assert await queue.settle(d, Ack()) is Settlement.LOST  # the suspension gave the claim back
    clock.advance(99)
    assert await queue.claim(1, lease=LEASE) == []
    clock.advance(1)
    again = await claim_one(queue)
    # Not an attempt (max_attempts=1 would be spent), but a claim.
    assert (again.attempt, again.claims, again.payload) == (1, 2, b"p")
    record = await queue.get("j")
    assert record is not None and (record.status, record.wait) == (JobStatus.RUNNING, None)


async def test_each_wait_shows_as_its_own_status(queue: LeaseQueue, clock: FakeClock) -> None:
    requires(Waking, queue)
    waits = [
        SLEEPING,
        Wait(JobStatus.WAITING_FOR_EVENT, "approval"),
        Wait(JobStatus.WAITING_FOR_CHILDREN, "2 of 3 children"),
    ]
    for i in range(len(waits)):
        await queue.enqueue(b"", id=f"j{i}")
    for d in await queue.claim(3, lease=LEASE):
        wait = waits[int(d.id[1:])]
        assert await queue.settle(d, Suspended(clock.now() + 60, wait)) is Settlement.SUSPENDED
    for i, wait in enumerate(waits):
        record = await queue.get(f"j{i}")
        assert record is not None and (record.status, record.wait) == (wait.status, wait)


async def test_wake_makes_a_suspended_job_due_at_once(queue: LeaseQueue, clock: FakeClock) -> None:
    waking = requires(Waking, queue)
    await queue.enqueue(b"", id="j")
    d = await claim_one(queue)
    await queue.settle(d, Suspended(clock.now() + 3600, SLEEPING))
    assert await waking.wake("j", JobStatus.SLEEPING) is True
    record = await queue.get("j")
    assert record is not None
    assert (record.status, record.wait, record.attempts) == (JobStatus.READY, None, 0)
    assert record.run_at <= clock.now()
    assert (await claim_one(queue)).attempt == 1
    assert await waking.wake("j", JobStatus.SLEEPING) is True  # held now: marked, not moved


async def test_a_wake_moves_only_a_job_waiting_for_what_arrived(
    queue: LeaseQueue, clock: FakeClock
) -> None:
    """An event sent to a run scheduled for later must not start it early, a
    retry's backoff stands, and a run asleep is not woken by a child's end."""
    waking = requires(Waking, queue)
    await queue.enqueue(b"", id="later", run_at=clock.now() + 20)
    await queue.enqueue(b"", id="backoff")
    assert await queue.settle(await claim_one(queue), Retry(30)) is Settlement.RETRIED
    await queue.enqueue(b"", id="asleep")
    await queue.settle(await claim_one(queue), Suspended(clock.now() + 3600, SLEEPING))
    for job_id in ("later", "backoff", "asleep"):
        assert await waking.wake(job_id, JobStatus.WAITING_FOR_EVENT) is True  # live
        assert await waking.wake(job_id, JobStatus.WAITING_FOR_CHILDREN) is True
    assert await queue.claim(3, lease=LEASE) == []
    assert [(await queue.get(i)).status for i in ("later", "backoff", "asleep")] == [  # type: ignore[union-attr]
        JobStatus.SCHEDULED,
        JobStatus.SCHEDULED,
        JobStatus.SLEEPING,
    ]
    assert await waking.wake("asleep", JobStatus.SLEEPING) is True  # what it waits for
    assert (await claim_one(queue)).id == "asleep"
    clock.advance(20)
    assert (await claim_one(queue)).id == "later"


async def test_a_wait_that_counts_what_it_needs_is_due_when_the_last_arrives(
    queue: LeaseQueue, clock: FakeClock
) -> None:
    """A parent awaiting three children: each that ends takes itself off,
    and only the last makes it due; a wake naming one not awaited changes
    nothing; a wake naming none (a child that failed) makes it due at once."""
    waking = requires(Waking, queue)
    children = Wait(JobStatus.WAITING_FOR_CHILDREN, "of 3 children", pending=("c1", "c2", "c3"))
    for job_id in ("p", "q"):
        await queue.enqueue(b"", id=job_id)
        await queue.settle(await claim_one(queue), Suspended(clock.now() + 3600, children))
    for arrived, left in (("c2", ("c1", "c3")), ("c9", ("c1", "c3")), ("c1", ("c3",))):
        assert await waking.wake("p", JobStatus.WAITING_FOR_CHILDREN, arrived=arrived) is True
        record = await queue.get("p")
        assert record is not None and record.status is JobStatus.WAITING_FOR_CHILDREN
        assert record.wait is not None and record.wait.pending == left
        assert record.wait.shown == f"{len(left)} of 3 children"
    assert await queue.claim(2, lease=LEASE) == []
    assert await waking.wake("p", JobStatus.WAITING_FOR_CHILDREN, arrived="c3") is True
    assert await waking.wake("q", JobStatus.WAITING_FOR_CHILDREN) is True  # (a failure)
    assert sorted(d.id for d in await queue.claim(2, lease=LEASE)) == ["p", "q"]
    for job_id in ("p", "q"):
        record = await queue.get(job_id)
        assert record is not None and (record.status, record.wait) == (JobStatus.RUNNING, None)


async def test_what_arrives_while_held_is_taken_off_the_wait_it_suspends_with(
    queue: LeaseQueue, clock: FakeClock
) -> None:
    """Children that end after their parent looked and before it suspended:
    its suspension needs only the rest, and returns at once when none is left."""
    waking = requires(Waking, queue)
    children = Wait(JobStatus.WAITING_FOR_CHILDREN, "of 2 children", pending=("c1", "c2"))
    await queue.enqueue(b"", id="p")
    held = await claim_one(queue)
    assert await waking.wake("p", JobStatus.WAITING_FOR_CHILDREN, arrived="c1") is True
    assert await queue.settle(held, Suspended(clock.now() + 3600, children)) is (
        Settlement.SUSPENDED
    )
    record = await queue.get("p")
    assert record is not None and record.wait is not None and record.wait.pending == ("c2",)
    assert await waking.wake("p", JobStatus.WAITING_FOR_CHILDREN, arrived="c2") is True
    again = await claim_one(queue)
    for arrived in ("c1", "c2"):
        assert await waking.wake("p", JobStatus.WAITING_FOR_CHILDREN, arrived=arrived)
    assert await queue.settle(again, Suspended(clock.now() + 3600, children)) is (
        Settlement.RETRIED
    )
    record = await queue.get("p")
    assert record is not None and (record.status, record.wait) == (JobStatus.READY, None)


async def test_a_wake_while_held_makes_the_next_suspend_return_at_once(
    queue: LeaseQueue, clock: FakeClock
) -> None:
    """What the job waits for happened between its last look and its
    suspension: the suspension must not sleep through it."""
    waking = requires(Waking, queue)
    await queue.enqueue(b"", id="j")
    d = await claim_one(queue)
    assert await waking.wake("j", JobStatus.SLEEPING) is True
    assert await queue.settle(d, Suspended(clock.now() + 3600, SLEEPING)) is Settlement.RETRIED
    record = await queue.get("j")
    assert record is not None and (record.status, record.wait) == (JobStatus.READY, None)
    again = await claim_one(queue)
    assert (again.attempt, again.claims) == (1, 2)
    # The mark is spent: the next suspension sleeps.
    assert await queue.settle(again, Suspended(clock.now() + 60, SLEEPING)) is (
        Settlement.SUSPENDED
    )


async def test_wake_of_an_unknown_or_dead_job_is_false(queue: LeaseQueue) -> None:
    waking = requires(Waking, queue)
    assert await waking.wake("never", JobStatus.SLEEPING) is False
    await queue.enqueue(b"", id="dead")
    await queue.settle(await claim_one(queue), Dead("x"))
    assert await waking.wake("dead", JobStatus.SLEEPING) is False
    await queue.enqueue(b"", id="acked")
    await queue.settle(await claim_one(queue), Ack())
    assert await waking.wake("acked", JobStatus.SLEEPING) is False
    await queue.enqueue(b"", id="ready")
    assert await waking.wake("ready", JobStatus.SLEEPING) is True  # due already: nothing to change
    assert (await claim_one(queue)).id == "ready"


async def test_a_suspend_with_a_stale_token_is_lost(queue: LeaseQueue, clock: FakeClock) -> None:
    requires(Waking, queue)
    await queue.enqueue(b"", id="j")
    old = await claim_one(queue, lease=10)
    clock.advance(10)
    new = await claim_one(queue, lease=10)
    assert await queue.settle(old, Suspended(clock.now() + 60, SLEEPING)) is Settlement.LOST
    record = await queue.get("j")
    assert record is not None and (record.status, record.wait) == (JobStatus.RUNNING, None)
    assert await queue.settle(new, Ack()) is Settlement.ACKED


# -- two processes on one store --------------------------------------------

store_only = pytest.mark.parametrize(
    "backend", [b for b in BACKENDS if b.startswith("store_")], indirect=True
)


@store_only
async def test_a_job_enqueued_by_one_process_is_claimed_by_another(backend: Backend) -> None:
    a, b = backend.make(), backend.make()
    await a.enqueue(b"from a", id="j", kind="k", headers={"h": "1"})
    d = await claim_one(b)
    assert (d.id, d.payload, d.kind, dict(d.headers)) == ("j", b"from a", "k", {"h": "1"})
    assert await a.claim(1, lease=LEASE) == []  # a's cache is stale: the swap must fail
    assert await b.settle(d, Ack()) is Settlement.ACKED
    assert await a.get("j") is None


@store_only
async def test_two_processes_racing_for_one_job_never_both_win(backend: Backend) -> None:
    a, b = backend.make(), backend.make()
    await a.enqueue(b"", id="j")
    assert await b.list() is not None
    # Both views now hold the same version; both try to swap it.
    won = await asyncio.gather(a.claim(1, lease=LEASE), b.claim(1, lease=LEASE))
    assert sorted(len(w) for w in won) == [0, 1]


@store_only
async def test_concurrent_claims_hand_each_job_to_exactly_one_process(backend: Backend) -> None:
    a, b = backend.make(), backend.make()
    ids = {(await a.enqueue(b"", id=f"j{i:02}")).id for i in range(12)}
    got: dict[str, str] = {}
    for _ in range(6):
        rounds = await asyncio.gather(a.claim(3, lease=LEASE), b.claim(3, lease=LEASE))
        for who, deliveries in zip("ab", rounds, strict=True):
            for d in deliveries:
                assert d.id not in got, f"{d.id} handed to {got.get(d.id)} and {who}"
                got[d.id] = who
    assert set(got) == ids


@store_only
async def test_another_process_takes_over_a_lapsed_lease(
    backend: Backend, clock: FakeClock
) -> None:
    a, b = backend.make(), backend.make()
    await a.enqueue(b"p", id="j")
    old = await claim_one(a, lease=10)
    assert await b.claim(1, lease=10) == []
    clock.advance(10)
    new = await claim_one(b, lease=10)
    assert (new.attempt, new.lapses, new.payload) == (1, 1, b"p")
    assert await a.renew(old, 100) is None
    assert await a.renew(old, 1) is None  # even a renewal that would not extend
    assert await a.settle(old, Ack()) is Settlement.LOST
    assert await a.settle(old, Release()) is Settlement.LOST
    assert await b.settle(new, Ack()) is Settlement.ACKED


@store_only
async def test_a_cancel_in_one_process_fences_the_holder_in_another(backend: Backend) -> None:
    a, b = backend.make(), backend.make()
    await a.enqueue(b"", id="j")
    d = await claim_one(a)
    assert await b.cancel("j") is True
    assert await a.settle(d, Ack()) is Settlement.LOST
    assert (await a.enqueue(b"", id="j")).created


@store_only
async def test_a_tenant_another_process_enqueued_is_served_before_a_backlog_is_read(
    backend: Backend, clock: FakeClock
) -> None:
    """A process knows another's jobs only once it reads them, and reads
    only what its claims need; a record's listed size says its key's class,
    so a tenant's jobs listed beside another tenant's backlog are read, and
    are served, long before that backlog is read through."""
    assert bucket_of("tenant-a") != bucket_of("tenant-b")  # (else read in line order)
    a, b = backend.make(), backend.make(claim_jitter=0.0)
    await a.enqueue_many(
        [NewJob(b"", id=f"a{i:03}", headers=tenant("tenant-a")) for i in range(300)]
    )
    clock.advance(1)
    await a.enqueue_many([NewJob(b"", id=f"b{i}", headers=tenant("tenant-b")) for i in range(3)])
    clock.advance(1)
    claimed = await claim_ids(b, 12)
    assert {"b0", "b1", "b2"} <= set(claimed[:8]), claimed


@store_only
async def test_work_one_process_gives_back_is_seen_by_another(
    backend: Backend, clock: FakeClock
) -> None:
    a, b = backend.make(), backend.make()
    await a.enqueue(b"", id="j", max_attempts=1)
    d = await claim_one(a)
    assert await b.claim(1, lease=LEASE) == []
    await a.settle(d, Release())
    d = await claim_one(b)
    await b.settle(d, Dead("x"))
    assert await a.requeue("j") is True
    assert (await claim_one(b)).attempt == 1


@store_only
async def test_a_wake_from_another_process_makes_the_job_due_for_its_holder(
    backend: Backend,
) -> None:
    a, b = backend.make(), backend.make()
    await a.enqueue(b"", id="j")
    d = await claim_one(a)
    assert isinstance(b, Waking)
    assert await b.wake("j", JobStatus.SLEEPING) is True  # while a holds it
    assert await a.settle(d, Suspended(backend.clock.now() + 3600, SLEEPING)) is (
        Settlement.RETRIED
    )
    d = await claim_one(a)
    await a.settle(d, Suspended(backend.clock.now() + 3600, SLEEPING))
    assert await b.wake("j", JobStatus.SLEEPING) is True  # while it sleeps
    assert (await claim_one(a)).claims == 3


@store_only
@pytest.mark.parametrize("skew", [-30.0, 30.0])
async def test_a_wake_on_a_skewed_clock_makes_the_job_due_on_the_sleepers(
    backend: Backend, skew: float
) -> None:
    """The waker's clock may be ahead of the sleeper's: "due now" by the
    waker's clock must still be due by the clock of the one that suspended it."""
    sleeper = backend.make()
    assert backend.store is not None
    waker = StoreQueue(
        backend.store, clock=FakeClock(backend.clock.now() + skew), scan_interval=0.0
    )
    await sleeper.enqueue(b"", id="j")
    d = await claim_one(sleeper, lease=10)
    # Held, its lease lapsed by the waker's clock when it runs ahead: its
    # holder may still be running it, so the wake must mark it all the same.
    assert await waker.wake("j", JobStatus.SLEEPING) is True
    assert await sleeper.settle(d, Suspended(backend.clock.now() + 3600, SLEEPING)) is (
        Settlement.RETRIED
    )
    d = await claim_one(sleeper)
    backend.clock.advance(1)
    await sleeper.settle(d, Suspended(backend.clock.now() + 3600, SLEEPING))
    backend.clock.advance(1)
    assert await waker.wake("j", JobStatus.SLEEPING) is True
    assert (await claim_one(sleeper)).id == "j"
