"""SqsQueue against moto's SQS server (a real HTTP endpoint, real visibility timeouts).

SQS's visibility is real time, so the lease tests use one-second leases and
wait on conditions with deadlines (:func:`claim_until`); the run-at tests move
a FakeClock and lower the 15-minute delay cap to one second instead.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from stepstone.runtime import FakeClock, JobListing, PayloadTooLarge, Settlement
from stepstone.runtime.decision import Ack, Dead, Release, Retry
from stepstone.runtime.queue import DEFAULT_MAX_ATTEMPTS, Delivery
from stepstone.runtime.sqs import SqsQueue, SqsUnsupported, Tier
from stepstone.runtime.sqs.message import encode
from stepstone.runtime.status import QUEUE_STATUSES, JobStatus
from stepstone.runtime.worker import Attempt, Worker
from stepstone.store import ObjectStore
from stepstone.testing import wait_until

Factory = Callable[..., Awaitable[SqsQueue]]


@pytest.fixture
async def make_queue(moto_server: str) -> AsyncIterator[Factory]:
    """SqsQueues on fresh SQS queues. ``peer=q`` gives a second SqsQueue on the
    same SQS queues: another process, as far as fencing and dedup can tell."""
    made: list[SqsQueue] = []

    async def factory(*, peer: SqsQueue | None = None, **kwargs: Any) -> SqsQueue:
        kwargs.setdefault("wait_time_seconds", 0)
        kwargs.setdefault("id_store", None)
        kwargs.setdefault("endpoint_url", moto_server)
        kwargs.setdefault("region", "us-east-1")
        if peer is not None:
            queue = SqsQueue(peer.name, **kwargs)
        else:
            queue = await SqsQueue.create(f"t-{uuid.uuid4().hex[:16]}", **kwargs)
        made.append(queue)
        return queue

    yield factory
    for queue in made:
        await queue.close()


async def claim_until(
    queue: SqsQueue, n: int = 1, *, lease: float = 30, within: float = 10.0, **kw: Any
) -> list[Delivery]:
    """Claim until ``n`` deliveries arrived or ``within`` seconds passed."""
    got: list[Delivery] = []
    deadline = time.monotonic() + within
    while len(got) < n and time.monotonic() < deadline:
        got.extend(await queue.claim(n - len(got), lease=lease, **kw))
        if len(got) < n:
            await asyncio.sleep(0.05)
    return got


async def claim_while_sent(
    queue: SqsQueue, n: int, producer: SqsQueue, payload: bytes
) -> list[Delivery]:
    """One claim of ``n`` by a consumer that has not long-polled yet, during
    which ``producer`` (a peer) enqueues ``payload`` on the low tier once the
    claim's long polls are out (a short poll of every tier, then a long poll
    of every tier): only a long poll can bring it."""
    polls = queue.requests["receive_message"] + 2 * len(queue.tiers)

    async def later() -> None:
        await wait_until(
            lambda: queue.requests["receive_message"] >= polls, message="the long polls"
        )
        await producer.enqueue(payload, priority=9)

    task = asyncio.create_task(later())
    got = await queue.claim(n, lease=30)
    await task
    return got


def dead_bodies(moto_server: str, queue: SqsQueue) -> list[dict[str, Any]]:
    """Read the dead-letter queue with a plain boto3 client (hides them for 1 s)."""
    import boto3

    client = boto3.client("sqs", endpoint_url=moto_server, region_name="us-east-1")
    url = client.get_queue_url(QueueName=queue.dead_queue_name)["QueueUrl"]
    messages = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=1)
    return [json.loads(m["Body"]) for m in messages.get("Messages", [])]


async def test_enqueue_claim_ack(make_queue: Factory) -> None:
    q = await make_queue()
    done = await q.enqueue(b"\x00\xffbinary", kind="k", headers={"trace": "t1"}, priority=2)
    assert done.created
    [d] = await claim_until(q)
    assert (d.id, d.kind, d.payload, d.attempt, d.claims) == (done.id, "k", b"\x00\xffbinary", 1, 1)
    assert (
        d.headers == {"trace": "t1"} and d.priority == 2 and d.max_attempts == DEFAULT_MAX_ATTEMPTS
    )
    assert d.lease_expires_at > q.clock.now()
    assert await q.claim(5, lease=30) == []
    assert await q.settle(d, Ack()) == Settlement.ACKED
    assert await q.settle(d, Ack()) == Settlement.LOST
    assert await q.counts() == dict.fromkeys(QUEUE_STATUSES, 0)


async def test_a_lapsed_lease_is_taken_over_as_a_lapse_and_the_stale_token_is_fenced(
    make_queue: Factory,
) -> None:
    a = await make_queue()
    b = await make_queue(peer=a)
    await a.enqueue(b"x", id="job-1")
    [first] = await claim_until(a, lease=1)
    # Another process picks it up once the visibility timeout runs out.
    [second] = await claim_until(b, lease=30)
    assert (second.id, second.attempt, second.claims, second.lapses) == ("job-1", 1, 2, 1)
    assert second.token != first.token
    # moto (like SQS for deletes) would accept the old receipt handle; the
    # local fence answers LOST without touching the message.
    assert await a.renew(first, 10) is None
    assert await a.settle(first, Ack()) == Settlement.LOST
    assert await a.settle(first, Retry(0)) == Settlement.LOST
    assert await a.settle(first, Dead("zombie")) == Settlement.LOST
    assert await a.settle(first, Release()) == Settlement.LOST
    # The message is still b's: a visibility change with b's handle works
    # (moto rejects it for a deleted message), and b's ack settles it.
    assert await b.renew(second, 60) is not None
    assert await b.settle(second, Ack()) == Settlement.ACKED
    assert await b.counts() == dict.fromkeys(QUEUE_STATUSES, 0)


async def test_renew_extends_the_visibility(make_queue: Factory) -> None:
    """A renewal made while the lease holds extends it: past the original
    lease, no one else can receive the message. (A lease of a second, as
    this test had, lapsed before its renewal on a loaded machine.)"""
    a = await make_queue()
    b = await make_queue(peer=a)
    await a.enqueue(b"x")
    lease = 6
    [d] = await claim_until(a, lease=lease)
    expires = await a.renew(d, 60)
    assert expires is not None and expires >= a.clock.now() + 50
    # Past the original lease (the time is the subject), no one else receives it.
    assert await claim_until(b, within=lease + 2) == []
    assert await a.settle(d, Ack()) == Settlement.ACKED


async def test_renew_with_time_to_spare_makes_no_request(make_queue: Factory) -> None:
    q = await make_queue()
    await q.enqueue(b"x")
    [d] = await claim_until(q, lease=60)
    before = q.requests["change_message_visibility"]
    expires = await q.renew(d, 10)
    assert expires is not None and expires > q.clock.now() + 50
    assert q.requests["change_message_visibility"] == before


async def test_nack_with_delay_is_not_delivered_early(make_queue: Factory) -> None:
    q = await make_queue()
    await q.enqueue(b"x")
    [d] = await claim_until(q)
    start = time.monotonic()
    assert await q.settle(d, Retry(2, error="boom")) == Settlement.RETRIED
    assert await q.claim(1, lease=30) == []
    [again] = await claim_until(q, within=8)
    assert time.monotonic() - start >= 1.9
    assert again.attempt == 2 and again.claims == 2


async def test_uncounted_nack_and_release_hand_the_attempt_back(make_queue: Factory) -> None:
    q = await make_queue()
    await q.enqueue(b"x", id="j")
    [d1] = await claim_until(q)
    assert d1.attempt == 1
    assert await q.settle(d1, Release()) == Settlement.RELEASED
    [d2] = await claim_until(q)
    assert (d2.attempt, d2.claims) == (1, 2)
    assert await q.settle(d2, Retry(0, count=False)) == Settlement.RETRIED
    [d3] = await claim_until(q)
    assert (d3.attempt, d3.claims) == (1, 3)
    assert await q.settle(d3, Retry(0)) == Settlement.RETRIED
    [d4] = await claim_until(q)
    assert (d4.attempt, d4.claims) == (2, 4)
    assert await q.settle(d1, Release()) == Settlement.LOST


async def test_long_backoff_is_re_sent_and_keeps_the_error(make_queue: Factory) -> None:
    """A retry goes out as a new message (re-deferred past SQS's delay cap,
    here lowered to 1 s) with the attempt carried: never by a visibility
    change, which a takeover of a lapsed lease could not be told from."""
    clock = FakeClock()
    q = await make_queue(clock=clock, max_delay_seconds=1)
    await q.enqueue(b"x", id="j")
    [d] = await claim_until(q)
    assert await q.settle(d, Retry(3600, error="later")) == Settlement.RETRIED
    assert await claim_until(q, within=1.5) == []  # re-deferred: not due on the fake clock
    clock.advance(3600)
    [again] = await claim_until(q)
    assert (again.attempt, again.claims, again.lapses) == (2, 2, 0)


async def test_last_counted_attempt_goes_dead_and_requeue_brings_it_back(
    make_queue: Factory, moto_server: str
) -> None:
    q = await make_queue()
    await q.enqueue(b"keep", id="other", max_attempts=3)
    await q.enqueue(b"x", id="j", kind="k", max_attempts=1, priority=8)
    got = await claim_until(q, 2)
    d = next(g for g in got if g.id == "j")
    other = next(g for g in got if g.id == "other")
    assert await q.settle(other, Dead("bad input")) == Settlement.DEAD
    assert await q.settle(d, Retry(0, error="ValueError: nope")) == Settlement.DEAD
    bodies = {b["id"]: b for b in dead_bodies(moto_server, q)}
    assert bodies["j"]["dead"] == "ValueError: nope" and bodies["j"]["a"] == 1
    assert bodies["other"]["dead"] == "bad input"
    assert (await q.counts())[JobStatus.DEAD] == 2
    assert await q.requeue("missing") is False
    assert await q.requeue("j") is True
    [back] = await claim_until(q)
    assert (back.id, back.kind, back.payload, back.priority) == ("j", "k", b"x", 8)
    assert back.attempt == 1 and back.claims >= 2
    # The job not asked for stayed dead.
    assert (await q.counts())[JobStatus.DEAD] == 1
    assert await q.requeue_all() == 1
    [also] = await claim_until(q)
    assert also.id == "other" and also.payload == b"keep"


async def test_redrive_policy_is_the_safety_net(make_queue: Factory) -> None:
    """A message received max_receive_count times unsettled lands in the DLQ
    by SQS's own redrive, and requeue finds it there like any other."""
    q = await make_queue(max_receive_count=2)
    await q.enqueue(b"x", id="stuck")
    for _ in range(2):
        assert len(await claim_until(q, lease=1)) == 1

    async def redriven() -> bool:
        assert await q.claim(1, lease=1) == []  # moto moves it on a receive
        return (await q.counts())[JobStatus.DEAD] == 1

    await wait_until(redriven, timeout=60, interval=0.2, message="the redrive to the DLQ")
    assert await q.requeue("stuck")
    [d] = await claim_until(q)
    assert d.attempt == 1 and d.claims >= 3


async def test_priorities_are_polled_by_weight(make_queue: Factory) -> None:
    q = await make_queue()
    for priority in (0, 5, 9):
        await asyncio.gather(*(q.enqueue(b"", priority=priority) for _ in range(10)))
    seen = []
    for _ in range(14):
        [d] = await claim_until(q)
        seen.append(d.priority)
    # 4:2:1 over two rounds of 7 claims; no tier is starved.
    assert (seen.count(0), seen.count(5), seen.count(9)) == (8, 4, 2)


async def test_custom_tiers_are_validated() -> None:
    with pytest.raises(ValueError):
        SqsQueue("x", id_store=None, tiers=[Tier("a", 0, 4, 1)])
    with pytest.raises(ValueError):
        SqsQueue("bad name!", id_store=None)


async def test_run_at_beyond_the_delay_cap_is_re_deferred(make_queue: Factory) -> None:
    """DelaySeconds stops at the cap (15 minutes on SQS, 1 s here): a job that
    arrives before its run-at is sent again, not delivered."""
    clock = FakeClock()
    q = await make_queue(clock=clock, max_delay_seconds=1)
    await q.enqueue(b"later", id="j", run_at=clock.now() + 3600)
    assert (await q.counts())[JobStatus.SCHEDULED] == 1
    sends = q.requests["send_message_batch"]

    async def re_deferred() -> bool:
        assert await q.claim(1, lease=30) == []
        return q.requests["send_message_batch"] > sends

    await wait_until(re_deferred, timeout=60, interval=0.1, message="the job re-deferred")
    assert q.requests["send_message_batch"] == sends + 1
    assert q.requests["delete_message_batch"] >= 1
    assert (await q.counts())[JobStatus.SCHEDULED] == 1
    clock.advance(3600)
    [d] = await claim_until(q)
    assert (d.id, d.payload, d.attempt, d.claims) == ("j", b"later", 1, 1)


async def test_payload_over_the_limit_is_refused(make_queue: Factory) -> None:
    q = await make_queue()
    with pytest.raises(PayloadTooLarge):
        await q.enqueue(b"x" * (256 * 1024 + 1))
    big = bytes(range(256)) * 1024  # exactly 256 KiB: fits SQS's 1 MiB once base64'd
    await q.enqueue(big, id="big")
    [d] = await claim_until(q)
    assert d.payload == big
    small = await make_queue(max_message_bytes=4096)
    with pytest.raises(PayloadTooLarge):
        await small.enqueue(b"y" * 4000)
    assert await small.counts() == dict.fromkeys(QUEUE_STATUSES, 0)


async def test_payload_over_the_message_limit_is_kept_on_s3(
    make_queue: Factory, s3_store: ObjectStore, moto_server: str
) -> None:
    """With an id store, a payload over ``spill_bytes`` travels in the job's
    marker (read at every claim anyway); the message stays small, through
    release, dead-letter and requeue."""
    import boto3

    q = await make_queue(id_store=s3_store, max_message_bytes=4096, max_payload_bytes=300_000)
    big = bytes(range(256)) * 1100  # 281,600 bytes: over 256 KiB and over the 4 KiB message cap
    await q.enqueue(big, id="big")
    await q.enqueue(b"small", id="small")
    client = boto3.client("sqs", endpoint_url=moto_server, region_name="us-east-1")
    url = client.get_queue_url(QueueName=f"{q.name}-normal")["QueueUrl"]
    peek = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    sizes = sorted(len(m["Body"]) for m in peek["Messages"])
    assert len(sizes) == 2 and sizes[-1] < 1024
    got = {d.id: d for d in await claim_until(q, 2)}
    assert got["big"].payload == big and got["small"].payload == b"small"
    assert await q.settle(got["big"], Release()) == Settlement.RELEASED
    [again] = await claim_until(q)
    assert again.payload == big
    assert await q.settle(again, Dead("too big to live")) == Settlement.DEAD
    assert await q.requeue("big")
    [back] = await claim_until(q)
    assert (back.payload, back.attempt) == (big, 1)
    assert await q.settle(back, Ack()) == Settlement.ACKED
    # Without an id store there is nowhere to keep it.
    plain = await make_queue(max_message_bytes=4096, max_payload_bytes=300_000)
    with pytest.raises(PayloadTooLarge, match="id store"):
        await plain.enqueue(big)


async def test_dedup_is_per_process(make_queue: Factory) -> None:
    a = await make_queue()
    b = await make_queue(peer=a)
    assert (await a.enqueue(b"1", id="same")).created
    assert not (await a.enqueue(b"2", id="same")).created
    # Another process cannot know: SQS standard queues do not deduplicate.
    assert (await b.enqueue(b"3", id="same")).created
    got = await claim_until(a, 2)
    assert sorted(d.payload for d in got) == [b"1", b"3"]
    for d in got:
        assert await a.settle(d, Ack()) == Settlement.ACKED
    assert (await a.enqueue(b"4", id="same")).created


async def test_cancel_in_this_process(make_queue: Factory) -> None:
    q = await make_queue()
    await q.enqueue(b"x", id="waiting")
    await q.enqueue(b"y", id="held")
    assert await q.cancel("waiting")
    [d] = await claim_until(q, 1)
    assert d.id == "held"
    assert await q.cancel("held")
    assert await q.settle(d, Ack()) == Settlement.LOST
    assert await q.renew(d, 5) is None
    assert await q.counts() == dict.fromkeys(QUEUE_STATUSES, 0)
    assert not await q.cancel("never-seen")


async def test_get_and_list_answer_honestly(make_queue: Factory) -> None:
    q = await make_queue()
    other = await make_queue(peer=q)
    await q.enqueue(b"x", id="held", kind="k")
    await q.enqueue(b"y", id="waiting", run_at=q.clock.now() + 60)
    assert not isinstance(q, JobListing)  # SQS cannot list messages: no list() to call
    # Another process has no lookup by id to offer, and says so.
    with pytest.raises(SqsUnsupported):
        await other.get("waiting")
    # This process enqueued it: it answers from memory, as enqueued.
    waiting = await q.get("waiting")
    assert waiting is not None and waiting.status == JobStatus.SCHEDULED
    assert waiting.payload == b"y"
    [d] = await claim_until(q)
    record = await q.get("held")
    assert record is not None
    assert (record.status, record.kind, record.attempts, record.payload) == (
        JobStatus.RUNNING,
        "k",
        1,
        b"x",
    )
    counts = await q.counts()
    assert counts[JobStatus.RUNNING] == 1 and counts[JobStatus.SCHEDULED] == 1
    assert d.id == "held"


async def test_id_store_dedups_across_processes_and_answers_get(
    make_queue: Factory, s3_store: ObjectStore
) -> None:
    """With an id store (S3 here) enqueue-with-id is create-if-absent fleet-wide,
    get answers for any live job, and a job's marker goes with its ack."""
    a = await make_queue(id_store=s3_store)
    b = await make_queue(peer=a, id_store=s3_store)
    assert (await a.enqueue(b"1", id="same", kind="k")).created
    assert not (await b.enqueue(b"2", id="same")).created
    seen = await b.get("same")
    assert seen is not None and (seen.status, seen.payload) == (JobStatus.READY, b"1")
    [d] = await claim_until(b)
    assert await b.claim(5, lease=30) == []  # one message, not two
    assert await a.get("missing") is None
    assert await b.settle(d, Ack()) == Settlement.ACKED
    assert await a.get("same") is None
    assert (await b.enqueue(b"3", id="same")).created


async def test_id_store_drops_duplicates_and_cancels_fleet_wide(
    make_queue: Factory, s3_store: ObjectStore, moto_server: str
) -> None:
    import boto3

    a = await make_queue(id_store=s3_store)
    b = await make_queue(peer=a, id_store=s3_store)
    await a.enqueue(b"x", id="j")
    [d] = await claim_until(a)
    # SQS may deliver a message again after its delete: replay the same body.
    client = boto3.client("sqs", endpoint_url=moto_server, region_name="us-east-1")
    url = client.get_queue_url(QueueName=f"{a.name}-normal")["QueueUrl"]
    raw = client.receive_message(QueueUrl=url, MaxNumberOfMessages=1)  # nothing visible
    assert "Messages" not in raw
    held = next(iter(a._fence.held.values()))
    body = encode(held.message)
    assert await a.settle(d, Ack()) == Settlement.ACKED
    client.send_message(QueueUrl=url, MessageBody=body)
    assert await claim_until(b, within=1.0) == []
    assert (await b.counts())[JobStatus.READY] == 0  # dropped, not left waiting
    # A cancel in one process stops the job in every other.
    await a.enqueue(b"y", id="c")
    assert await b.cancel("c")
    assert await claim_until(a, within=1.0) == []
    assert await a.get("c") is None
    assert not await b.cancel("c")


async def test_id_store_lets_one_of_two_holders_of_a_duplicate_ack(
    make_queue: Factory, s3_store: ObjectStore, moto_server: str
) -> None:
    """SQS can deliver one message to two receivers at once (moto's receive
    did, under load); both receipts can delete it, so the marker decides."""
    import boto3

    a = await make_queue(id_store=s3_store)
    b = await make_queue(peer=a, id_store=s3_store)
    await a.enqueue(b"x", id="j")
    [first] = await claim_until(a)
    # The duplicate: the same body delivered again while the first is held.
    client = boto3.client("sqs", endpoint_url=moto_server, region_name="us-east-1")
    url = client.get_queue_url(QueueName=f"{a.name}-normal")["QueueUrl"]
    held = next(iter(a._fence.held.values()))
    client.send_message(QueueUrl=url, MessageBody=encode(held.message))
    [second] = await claim_until(b)
    assert (second.id, first.id) == ("j", "j")
    # Both look at the marker before either settles:
    settled = await asyncio.gather(a.settle(first, Ack()), b.settle(second, Ack()))
    assert sorted(settled) == sorted([Settlement.ACKED, Settlement.LOST])
    assert await a.get("j") is None
    assert (await a.counts())[JobStatus.READY] == 0


async def test_id_store_cancel_fences_the_holder_in_another_process(
    make_queue: Factory, s3_store: ObjectStore
) -> None:
    a = await make_queue(id_store=s3_store)
    b = await make_queue(peer=a, id_store=s3_store)
    await a.enqueue(b"", id="j")
    [d] = await claim_until(a)
    assert await b.cancel("j")
    assert await a.renew(d, 60) is None
    assert await a.settle(d, Ack()) == Settlement.LOST
    assert (await a.enqueue(b"", id="j")).created


async def test_id_store_keeps_dead_jobs_visible(make_queue: Factory, s3_store: ObjectStore) -> None:
    q = await make_queue(id_store=s3_store)
    await q.enqueue(b"x", id="d")
    [d] = await claim_until(q)
    assert await q.settle(d, Dead("no such customer")) == Settlement.DEAD
    record = await q.get("d")
    assert record is not None and record.status == JobStatus.DEAD
    assert record.dead_reason == "no such customer"
    assert await q.requeue("d")
    record = await q.get("d")
    assert record is not None and record.status == JobStatus.READY
    [again] = await claim_until(q)
    assert again.attempt == 1
    assert await q.settle(again, Ack()) == Settlement.ACKED


async def test_kinds_filter_does_not_burn_attempts(make_queue: Factory) -> None:
    q = await make_queue()
    await q.enqueue(b"", kind="a", id="a1")
    await q.enqueue(b"", kind="b", id="b1")
    got = await claim_until(q, 1, kinds={"a"})
    assert [d.id for d in got] == ["a1"]
    [b] = await claim_until(q, kinds={"b"})
    assert (b.id, b.attempt) == ("b1", 1)


async def test_wakes_listeners_on_enqueue(make_queue: Factory) -> None:
    q = await make_queue()
    woken: list[int] = []
    unsubscribe = q.subscribe(lambda: woken.append(1))
    await q.enqueue(b"")
    unsubscribe()
    await q.enqueue(b"")
    assert woken == [1]


@pytest.mark.parametrize("n", [4, 1])
async def test_long_poll_waits_for_work(make_queue: Factory, n: int) -> None:
    """The long polls cover every tier, even for a claim of one slot (one that
    polled only the heaviest tier waited out the whole poll while messages
    queued in another)."""
    q = await make_queue(wait_time_seconds=20)
    producer = await make_queue(peer=q)
    got = await claim_while_sent(q, n, producer, b"late")
    # A claim that long-polled only the heaviest tier would have come back
    # empty (after its 20 s): the low tier's own long poll brought it.
    assert [d.payload for d in got] == [b"late"]


async def test_an_idle_consumer_goes_straight_to_its_long_polls(make_queue: Factory) -> None:
    """Once a long poll of every tier came back empty, the next claim skips
    the short polls (they were half an idle consumer's receives), and still
    gets a message at once; after a tier gave one, the short polls come back."""
    q = await make_queue(wait_time_seconds=2)
    producer = await make_queue(peer=q)
    tiers = len(q.tiers)

    async def receives(claim: Awaitable[list[Delivery]]) -> tuple[int, list[bytes]]:
        before = q.requests["receive_message"]
        got = await claim
        return q.requests["receive_message"] - before, [d.payload for d in got]

    assert await receives(q.claim(4, lease=30)) == (2 * tiers, [])  # short, then long
    assert await receives(q.claim(1, lease=30)) == (tiers, [])  # long polls only
    await producer.enqueue(b"low", priority=9)
    assert await receives(q.claim(4, lease=30)) == (tiers, [b"low"])
    # A tier gave a message: short polls first again (then a long poll of each
    # tier whose poll is not still out).
    count, got = await receives(q.claim(4, lease=30))
    assert count > tiers and got == []


async def test_a_message_a_background_poll_brings_wakes_the_worker(make_queue: Factory) -> None:
    """A long poll still out when its claim returned keeps what it brings for
    the next claim, and says so (the queue's listeners: a worker wakes to
    claim it rather than at its next poll interval)."""
    q = await make_queue(wait_time_seconds=5)
    producer = await make_queue(peer=q)
    got = await claim_while_sent(q, 4, producer, b"low")  # the low tier's poll answers
    assert [d.payload for d in got] == [b"low"]
    woken = asyncio.Event()
    unsubscribe = q.subscribe(woken.set)
    await producer.enqueue(b"high", priority=0)  # to the high tier's poll, still out
    await asyncio.wait_for(woken.wait(), timeout=10)
    unsubscribe()
    assert [d.payload for d in await q.claim(4, lease=30)] == [b"high"]


async def test_a_closing_queue_gives_back_what_its_background_polls_brought(
    make_queue: Factory,
) -> None:
    """A graceful stop gives back what it prefetched: a message a long poll
    brought after its claim returned is put back when the queue closes,
    visible to the next consumer at once (not after the claim's lease), with
    no attempt and no lapse spent."""
    q = await make_queue(wait_time_seconds=5)
    producer = await make_queue(peer=q)
    got = await claim_while_sent(q, 4, producer, b"low")  # the low tier's poll answers
    assert [d.payload for d in got] == [b"low"]
    brought = asyncio.Event()
    unsubscribe = q.subscribe(brought.set)
    await producer.enqueue(b"high", priority=0)  # to the high tier's poll, still out
    await asyncio.wait_for(brought.wait(), timeout=60)
    unsubscribe()
    await q.close()
    # (30 s lease: left invisible, it would not come back within the claims below)
    [again] = await claim_until(producer, within=20)
    assert (again.payload, again.attempt, again.lapses, again.took_over) == (b"high", 1, 0, False)
    assert await producer.settle(again, Ack()) == Settlement.ACKED


async def test_a_stopping_worker_gives_back_what_its_queues_polls_brought(
    make_queue: Factory,
) -> None:
    """A worker's graceful stop gives back what its queue received ahead of
    its claims, though the queue itself is left open (a queue the
    application owns and closes later, or never): the job is visible to
    the next consumer at once, with no attempt and no lapse spent."""
    q = await make_queue(wait_time_seconds=5)
    producer = await make_queue(peer=q)
    release = asyncio.Event()
    ran: list[bytes] = []

    async def handle(attempt: Attempt) -> None:
        ran.append(attempt.delivery.payload)
        await release.wait()  # holds the worker's one slot: nothing more is claimed

    worker = Worker(q, concurrency=1, lease=30, poll_interval=0.05)
    worker.register("k", handle)
    brought = asyncio.Event()
    unsubscribe = q.subscribe(brought.set)
    async with worker:
        await producer.enqueue(b"low", kind="k", priority=9)
        await wait_until(lambda: ran == [b"low"], timeout=30, message="the first job ran")
        # The claim's long polls of the other tiers are still out.
        brought.clear()
        await producer.enqueue(b"high", kind="k", priority=0)
        await asyncio.wait_for(brought.wait(), timeout=60)
        release.set()
    unsubscribe()
    assert ran == [b"low"]
    # (30 s lease: left invisible, it would not come back within the claims below)
    [again] = await claim_until(producer, within=20)
    assert (again.payload, again.attempt, again.lapses, again.took_over) == (b"high", 1, 0, False)
    assert await producer.settle(again, Ack()) == Settlement.ACKED


async def test_requests_per_job(make_queue: Factory) -> None:
    """The figure docs/scaling.md prices: a burst of jobs enqueued at once,
    claimed 10 at a time and acked at once, costs well under one SQS request
    per job thanks to batch send, batch receive and batch delete."""
    q = await make_queue()
    jobs = 100
    await asyncio.gather(*(q.enqueue(b"p" * 100) for _ in range(jobs)))
    done = 0
    while done < jobs:
        got = await q.claim(10, lease=30)
        results = await asyncio.gather(*(q.settle(d, Ack()) for d in got))
        assert all(r == Settlement.ACKED for r in results)
        done += len(got)
    per_job = {op: count / jobs for op, count in q.requests.items() if "queue" not in op}
    print("SQS requests per job:", per_job, "total", sum(per_job.values()))
    assert per_job["send_message_batch"] <= 0.15
    assert per_job["delete_message_batch"] <= 0.15
    assert sum(per_job.values()) <= 0.6


async def test_a_message_holding_values_no_job_could_have_is_set_aside_naming_the_field(
    make_queue: Factory, moto_server: str
) -> None:
    """A message that decodes but holds a count or time that could not be
    real (stepstone.runtime.plausible) is set aside in the dead-letter queue
    with a reason naming the field, never delivered and retried for good."""
    import boto3

    q = await make_queue()
    client = boto3.client("sqs", endpoint_url=moto_server, region_name="us-east-1")
    url = client.get_queue_url(QueueName=f"{q.name}-normal")["QueueUrl"]
    good = {"v": 1, "kind": "k", "prio": 5, "max": 3, "run_at": time.time(), "enq": time.time()}
    good.update(a=0, c=0, h={}, p="")
    hostile = {"max": 2**63, "a": -5, "c": 10**7, "run_at": 1e20, "enq": -1e12, "died": 1e11}
    for n, (key, value) in enumerate(hostile.items()):
        body = json.dumps({**good, "id": f"j{n}", key: value})
        client.send_message(QueueUrl=url, MessageBody=body)
    assert await claim_until(q, within=1.5) == []
    reasons: set[str] = set()

    def all_dead() -> bool:
        reasons.update(body["dead"] for body in dead_bodies(moto_server, q))
        return len(reasons) == len(hostile)

    await wait_until(all_dead, timeout=30, interval=0.05, message=f"{len(hostile)} set aside")
    assert sorted(reason.split("'")[1] for reason in reasons) == sorted(hostile), reasons
    await q.enqueue(b"after", id="after")
    [delivery] = await claim_until(q)
    assert delivery.id == "after"
