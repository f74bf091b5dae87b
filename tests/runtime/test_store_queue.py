"""StoreQueue beyond the shared contract: what it costs in store requests,
how it treats records it cannot read, and how its cache stays small and right.

Request counts are the product here (on S3 they are the bill), so they are
asserted exactly, through ``stepstone.store.counting.CountingStore``; docs/queue.md
quotes them. test_multiprocess_queue.py measures several processes.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepstone.runtime import (
    Delivery,
    Enqueued,
    FakeClock,
    JobRecord,
    JobStatus,
    Settlement,
    Wait,
)
from stepstone.runtime.decision import Ack, Dead, Release, Retry, Suspended
from stepstone.runtime.queue import NewJob
from stepstone.runtime.status import QUEUE_STATUSES
from stepstone.runtime.store_queue import StoreQueue
from stepstone.runtime.store_queue.records import (
    CorruptRecord,
    StoredJob,
    decode,
    encode,
    listed_priority,
)
from stepstone.store import MemoryStore, ObjectStore
from stepstone.store.counting import CONDITIONAL_PUT, CountingStore
from stepstone.store.doubles.faults import WRITES, FaultyStore
from stepstone.store.errors import StoreUnavailable
from stepstone.testing import wait_until

T = TypeVar("T")


def take(store: CountingStore) -> dict[str, int]:
    """The requests since the last take, by S3 verb (a conditional PUT is a
    PUT; ``scan`` is one LIST per page), without zeros."""
    out: Counter[str] = Counter()
    for kind, n in store.counts.items():
        out["PUT" if kind == CONDITIONAL_PUT else kind] += n
    store.reset()
    return {kind: n for kind, n in out.items() if n}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def backing(clock: FakeClock) -> MemoryStore:
    return MemoryStore(clock=clock.now)


def make(
    backing: ObjectStore, clock: FakeClock, **options: object
) -> tuple[StoreQueue, CountingStore]:
    counting = CountingStore(backing)
    return StoreQueue(counting, clock=clock, **options), counting  # type: ignore[arg-type]


# -- requests, one process ---------------------------------------------------


async def test_each_operation_costs_one_request_for_a_process_own_jobs(
    backing: MemoryStore, clock: FakeClock
) -> None:
    q, store = make(backing, clock)
    assert (await q.enqueue(b"p", id="a")).created
    assert take(store) == {"PUT": 1}
    assert not (await q.enqueue(b"p", id="a")).created
    assert take(store) == {"PUT": 1}  # the refused create-if-absent
    await q.enqueue(b"p", id="b")
    take(store)

    [d] = await q.claim(1, lease=30)
    assert take(store) == {"PUT": 1}  # from the cache: no LIST, no GET
    assert await q.renew(d, 60) is not None
    assert take(store) == {"PUT": 1}
    assert await q.renew(d, 1) is not None  # would not extend: a HEAD confirms the token
    assert take(store) == {"HEAD": 1}
    assert await q.settle(d, Retry(0)) is Settlement.RETRIED
    assert take(store) == {"PUT": 1}
    [d] = await q.claim(1, lease=30)
    assert await q.settle(d, Release()) is Settlement.RELEASED
    assert take(store) == {"PUT": 2}
    [d] = await q.claim(1, lease=30)
    assert await q.settle(d, Ack()) is Settlement.ACKED
    assert take(store) == {"PUT": 1, "DELETE": 1}

    [d] = await q.claim(1, lease=30)
    assert await q.settle(d, Dead("x")) is Settlement.DEAD
    assert take(store) == {"PUT": 2}
    assert await q.requeue(d.id)
    assert take(store) == {"GET": 1, "PUT": 1}
    assert await q.cancel(d.id)
    assert take(store) == {"DELETE": 1}  # the cache knows its etag
    assert not await q.cancel(d.id)
    assert take(store) == {"HEAD": 1}


async def test_a_job_enqueued_claimed_costs_one_write_and_settles_like_a_claim(
    backing: MemoryStore, clock: FakeClock
) -> None:
    """``enqueue_claimed``: the record is created holding the caller's lease,
    one PUT where an enqueue and a claim take two (the refused create of a
    live id is one PUT too)."""
    q, store = make(backing, clock)
    enqueued, d = await q.enqueue_claimed(NewJob(b"p", kind="k", id="a"), lease=30)
    assert enqueued.created and d is not None
    assert (d.id, d.kind, d.payload, d.attempt, d.claims) == ("a", "k", b"p", 1, 1)
    assert d.lease_expires_at == clock.now() + 30
    assert take(store) == {"PUT": 1}
    assert await q.renew(d, 60) is not None
    assert await q.settle(d, Ack()) is Settlement.ACKED
    assert take(store) == {"PUT": 1, "DELETE": 1}

    await q.enqueue(b"p", id="b")
    take(store)
    assert await q.enqueue_claimed(NewJob(b"p", id="b"), lease=30) == (
        Enqueued("b", created=False),
        None,
    )
    assert take(store) == {"PUT": 1}


async def test_a_job_enqueued_claimed_by_a_process_that_died_runs_once_its_lease_lapses(
    backing: MemoryStore, clock: FakeClock
) -> None:
    a, _ = make(backing, clock)
    b, _ = make(backing, clock, scan_interval=0.0)
    _, held = await a.enqueue_claimed(NewJob(b"p", id="j"), lease=30)  # and a dies
    assert held is not None
    assert await b.claim(1, lease=30) == []
    clock.advance(31)
    [d] = await b.claim(1, lease=30)
    assert (d.id, d.attempt, d.claims, d.lapses) == ("j", 1, 2, 1)
    assert await a.settle(held, Ack()) is Settlement.LOST


async def test_a_process_working_its_own_jobs_lists_rarely_and_never_gets(
    backing: MemoryStore, clock: FakeClock
) -> None:
    q, store = make(backing, clock, scan_interval=3600.0)
    for i in range(200):
        await q.enqueue(b"x" * 100, id=f"j{i:03}")
    assert take(store) == {"PUT": 200}
    done = 0
    while done < 200:
        batch = await q.claim(8, lease=30)
        assert batch
        for d in batch:
            assert await q.settle(d, Ack()) is Settlement.ACKED
            done += 1
    # The cache served every claim: no listing, no read.
    assert take(store) == {"PUT": 200, "DELETE": 200}
    assert await q.claim(8, lease=30) == []  # an empty cache: this one lists
    assert take(store) == {"LIST": 1}
    assert await q.claim(8, lease=30) == []  # inside scan_interval: no LIST
    assert take(store) == {}


async def test_an_empty_queue_lists_once_per_scan_interval(
    backing: MemoryStore, clock: FakeClock
) -> None:
    # The interval is real time (request cost, not job time): long enough
    # that twenty claims fit in it on a busy machine.
    q, store = make(backing, clock, scan_interval=2.0)
    assert await q.claim(4, lease=30) == []
    assert take(store) == {"LIST": 1}
    for _ in range(20):
        assert await q.claim(4, lease=30) == []
    assert take(store) == {}
    await asyncio.sleep(2.05)
    assert await q.claim(4, lease=30) == []
    assert take(store) == {"LIST": 1}


# -- requests, several processes ---------------------------------------------


async def test_another_process_reads_each_record_once_per_change_it_sees(
    backing: MemoryStore, clock: FakeClock
) -> None:
    a, a_store = make(backing, clock, scan_interval=0.0)
    b, b_store = make(backing, clock, scan_interval=0.0)
    for i in range(10):
        await a.enqueue(b"", id=f"j{i}")
    assert take(a_store) == {"PUT": 10}
    got = await b.claim(10, lease=30)
    assert len(got) == 10
    assert take(b_store) == {"LIST": 1, "GET": 10, "PUT": 10}
    for d in got:
        await b.settle(d, Ack())
    assert take(b_store) == {"DELETE": 10}
    # a's cache still holds them as ready, but not confirmed within
    # scan_interval: it lists before swapping, and sees them gone.
    assert await a.claim(10, lease=30) == []
    assert take(a_store) == {"LIST": 1}
    assert a.stats.lost_races == 0


async def test_a_lost_race_costs_one_refused_put_and_a_listing(
    backing: MemoryStore, clock: FakeClock
) -> None:
    a, a_store = make(backing, clock, scan_interval=3600.0)
    b, _ = make(backing, clock, scan_interval=0.0)
    await a.enqueue(b"", id="taken", kind="k")
    await a.enqueue(b"", id="free", priority=9)
    [first] = await b.claim(1, lease=30, kinds=["k"])
    assert first.id == "taken"
    take(a_store)
    # a tries "taken" from its stale cache and loses; a refused swap costs
    # what a listing does, so it lists (learning, from the size alone, that
    # "taken" was claimed: no GET) before it swaps "free".
    [d] = await a.claim(1, lease=30)
    assert d.id == "free"
    assert take(a_store) == {"PUT": 2, "LIST": 1}
    assert a.stats.lost_races == 1


async def test_another_holder_renewing_is_not_reread_until_its_lease_would_lapse(
    backing: MemoryStore, clock: FakeClock
) -> None:
    a, _ = make(backing, clock, scan_interval=0.0)
    b, b_store = make(backing, clock, scan_interval=0.0)
    await a.enqueue(b"", id="long")
    [d] = await a.claim(1, lease=30)
    assert await b.claim(1, lease=30) == []
    assert take(b_store) == {"LIST": 1, "GET": 1}
    for _ in range(2):
        clock.advance(10)
        assert await a.renew(d, 30) is not None
        assert await b.claim(1, lease=30) == []
        assert take(b_store) == {"LIST": 1}  # a renewal: same size, lease not lapsed
    clock.advance(15)  # past the lease b saw (but a renewed it): b reads it once
    assert await b.claim(1, lease=30) == []
    assert take(b_store) == {"LIST": 1, "GET": 1}
    assert await b.claim(1, lease=30) == []
    assert take(b_store) == {"LIST": 1}
    # A settlement changes the size: b reads it at once.
    assert await a.settle(d, Retry(0)) is Settlement.RETRIED
    [again] = await b.claim(1, lease=30)
    assert again.attempt == 2
    assert take(b_store) == {"LIST": 1, "GET": 1, "PUT": 1}


async def test_records_held_elsewhere_or_dead_keep_no_payload_in_the_cache(
    backing: MemoryStore, clock: FakeClock
) -> None:
    a, _ = make(backing, clock)
    b, _ = make(backing, clock, scan_interval=0.0)
    await a.enqueue(b"big" * 100, id="held")
    await a.enqueue(b"big" * 100, id="dead")
    await a.enqueue(b"big" * 100, id="ready", priority=9)
    [held] = await a.claim(1, lease=30)
    [dead] = await a.claim(1, lease=30)
    await a.settle(dead, Dead("x"))
    assert await b.claim(1, lease=30, kinds=["other"]) == []
    cache = b._cache
    assert {i: cache[i].job.payload == b"" for i in cache if cache[i].job} == {  # type: ignore[union-attr]
        "held": True,
        "dead": True,
        "ready": False,
    }
    assert held.payload == b"big" * 100


async def test_a_listing_asked_again_reads_only_the_records_that_changed(
    backing: MemoryStore, clock: FakeClock
) -> None:
    """What a web view's refresh costs: the records another process holds and
    the dead (whose payload the record cache does not keep) are read once, not at
    every listing; a record that changed is read again, one that is gone is
    forgotten."""
    a, _ = make(backing, clock)
    viewer, counting = make(backing, clock)
    for n in range(4):
        await a.enqueue(b"payload", id=f"job-{n}")
    [held] = await a.claim(1, lease=30)
    [dead] = await a.claim(1, lease=30)
    await a.settle(dead, Dead("x"))
    first = await viewer.list()
    assert take(counting) == {"GET": 4, "LIST": 1}
    assert {r.id: r.payload for r in first.records} == {f"job-{n}": b"payload" for n in range(4)}
    again = await viewer.list()
    assert take(counting) == {"LIST": 1}
    assert again.records == first.records
    await a.renew(held, 60)
    await a.settle(held, Ack())
    [other] = await a.claim(1, lease=30)
    await a.renew(other, 60)
    changed = await viewer.list()
    assert take(counting) == {"GET": 1, "LIST": 1}
    assert sorted(r.id for r in changed.records) == sorted(
        r.id for r in first.records if r.id != held.id
    )
    assert viewer._inspection._whole.keys() == {r.id for r in changed.records}


async def test_a_survey_reads_at_most_its_budget_and_shows_no_record_it_did_not_read(
    backing: MemoryStore, clock: FakeClock
) -> None:
    """A web view's first refreshes over more records than it may read: each
    reads at most the budget, the rest counted unread (never shown from a
    guess), until all are known; a record changed since is unread again, not
    shown as it was."""
    a, _ = make(backing, clock)
    viewer, counting = make(backing, clock)
    for n in range(5):
        await a.enqueue(b"payload", id=f"job-{n}")
    seen = []
    for _ in range(3):
        surveyed = await viewer.survey(reads=2)
        seen.append((len(surveyed.records), surveyed.unread, surveyed.listed))
        assert take(counting) == (
            {"GET": 2, "LIST": 1} if surveyed.unread else {"GET": 1, "LIST": 1}
        )
    assert seen == [(2, 3, 5), (4, 1, 5), (5, 0, 5)]
    [held] = await a.claim(1, lease=30)
    stale = await viewer.survey(reads=0)
    assert take(counting) == {"LIST": 1}
    assert (stale.unread, stale.listed) == (1, 5)
    assert held.id not in {r.id for r in stale.records}
    fresh = await viewer.survey(reads=1)
    assert take(counting) == {"GET": 1, "LIST": 1}
    assert {r.id: r.status for r in fresh.records}[held.id] is JobStatus.RUNNING


async def test_a_backlog_another_process_enqueued_is_read_as_claims_need_it(
    backing: MemoryStore, clock: FakeClock
) -> None:
    """One listing, then one GET per job claimed: no waiting for the next
    listing to read more, and no reading of jobs the claim does not want."""
    a, _ = make(backing, clock)
    for i in range(50):
        await a.enqueue(b"", id=f"j{i:02}")
    b, b_store = make(backing, clock, scan_interval=3600.0)
    claimed: list[str] = []
    for round_ in range(5):
        got = await b.claim(10, lease=30)
        assert len(got) == 10
        claimed += [d.id for d in got]
        listing = {"LIST": 1} if round_ == 0 else {}
        assert take(b_store) == {**listing, "GET": 10, "PUT": 10}
    assert sorted(claimed) == [f"j{i:02}" for i in range(50)]
    assert await b.claim(10, lease=30) == []


async def test_fetch_limit_bounds_one_round_of_reads_not_what_a_claim_gets(
    backing: MemoryStore, clock: FakeClock
) -> None:
    a, _ = make(backing, clock)
    for i in range(30):
        await a.enqueue(b"", id=f"j{i:02}")
    b, b_store = make(backing, clock, scan_interval=3600.0, fetch_limit=4)
    assert len(await b.claim(10, lease=30)) == 10
    assert len(await b.claim(20, lease=30)) == 20
    assert take(b_store) == {"LIST": 1, "GET": 30, "PUT": 30}


async def test_records_enqueued_elsewhere_are_read_oldest_first(
    backing: MemoryStore, clock: FakeClock
) -> None:
    """A listing shows when each record last changed, not what it holds: a
    process reads (and so claims) others' jobs first in first out, to the
    claim jitter (half a second)."""
    a, _ = make(backing, clock)
    for name in ("old", "mid", "new"):
        for i in range(5):
            await a.enqueue(b"", id=f"{name}{i}")
        clock.advance(10)
    b, _ = make(backing, clock)
    for name in ("old", "mid", "new"):
        got = await b.claim(5, lease=30)
        assert sorted(d.id for d in got) == [f"{name}{i}" for i in range(5)]


async def test_an_urgent_job_enqueued_elsewhere_is_read_and_claimed_first(
    backing: MemoryStore, clock: FakeClock
) -> None:
    """Its size says its priority: it is read before a backlog enqueued
    earlier, with one GET, not after reading the backlog."""
    a, _ = make(backing, clock)
    for i in range(30):
        await a.enqueue(b"", id=f"j{i:02}")
    clock.advance(5)
    await a.enqueue(b"", id="urgent", priority=0)
    b, b_store = make(backing, clock)
    [d] = await b.claim(1, lease=30)
    assert d.id == "urgent"
    assert take(b_store) == {"LIST": 1, "GET": 1, "PUT": 1}


async def test_processes_sharing_a_backlog_read_each_record_about_once(
    backing: MemoryStore, clock: FakeClock
) -> None:
    """Each reads from its own point of the key order and jumps when it runs
    into the other's stretch, instead of both reading everything."""
    a, _ = make(backing, clock)
    for i in range(200):
        await a.enqueue(b"", id=f"j{i:03}")
    b, b_store = make(backing, clock, scan_interval=3600.0)
    c, c_store = make(backing, clock, scan_interval=3600.0)
    claimed: list[str] = []
    while True:
        got_b, got_c = await b.claim(10, lease=30), await c.claim(10, lease=30)
        if not got_b and not got_c:
            break
        claimed += [d.id for d in got_b + got_c]
        clock.advance(1)  # later than the enqueues, as claims are
        await asyncio.gather(
            *(b.settle(d, Ack()) for d in got_b), *(c.settle(d, Ack()) for d in got_c)
        )
    assert sorted(claimed) == [f"j{i:03}" for i in range(200)]
    reads = b_store.counts["GET"] + c_store.counts["GET"]
    assert reads < 320, reads  # both reading everything: 400; 30 runs: 232 to 271


async def test_a_process_finds_the_jobs_left_among_those_another_process_holds(
    backing: MemoryStore, clock: FakeClock
) -> None:
    """It reads the held ones it runs into once each (their size does not say
    they are held: benchmarks/NOTES.md), and claims every job left."""
    a, _ = make(backing, clock)
    for i in range(20):
        await a.enqueue(b"", id=f"j{i:02}")
    b, _ = make(backing, clock)
    held = {d.id for d in await b.claim(10, lease=30)}
    c, c_store = make(backing, clock)
    got = await c.claim(10, lease=30)
    # A claim's rounds are bounded, and probing records the other holds
    # spends them: now and then one falls a job short, which its next claim takes.
    if len(got) < 10:
        got += await c.claim(10 - len(got), lease=30)
    assert not held & {d.id for d in got} and len(got) == 10
    counts = take(c_store)
    assert counts["LIST"] <= 2 and counts["PUT"] == 10 and counts["GET"] <= 20


async def test_a_race_lost_for_a_record_just_read_does_not_list_again(
    backing: MemoryStore, clock: FakeClock
) -> None:
    """The loser's cache was as fresh as a listing would make it: listing
    again would not have helped. (A cache older than the claim does list:
    test_a_lost_race_costs_one_refused_put_and_a_listing.)"""
    a, _ = make(backing, clock)
    await a.enqueue(b"", id="only")
    b, b_store = make(backing, clock, scan_interval=3600.0)
    c, c_store = make(backing, clock, scan_interval=3600.0)
    got = await asyncio.gather(b.claim(1, lease=30), c.claim(1, lease=30))
    assert sorted(len(g) for g in got) == [0, 1]
    assert b.stats.lost_races + c.stats.lost_races == 1
    assert b_store.counts["LIST"] + c_store.counts["LIST"] == 2


# -- records that will not decode ----------------------------------------------


async def test_a_garbage_record_is_skipped_counted_and_named(
    backing: MemoryStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    q, store = make(backing, clock, scan_interval=0.0)
    await backing.put("queue/jobs/garbage", b"\xc1 not msgpack")
    good = encode(_job("truncated"))
    await backing.put("queue/jobs/truncated", good[: len(good) // 2])
    await backing.put("queue/jobs/wrong-id", encode(_job("someone-else")))
    # Held, but with no lease to say when it lapses: nothing could ever claim it.
    await backing.put("queue/jobs/no-lease", encode(replace(_job("no-lease"), token="0" * 24)))
    await q.enqueue(b"", id="fine")
    [d] = await q.claim(5, lease=30)
    assert d.id == "fine"
    assert q.stats.corrupt_records == 4
    assert q.stats.corrupt_keys == {
        "queue/jobs/garbage",
        "queue/jobs/truncated",
        "queue/jobs/wrong-id",
        "queue/jobs/no-lease",
    }
    assert "queue/jobs/garbage" in caplog.text
    take(store)
    assert await q.claim(5, lease=30) == []
    assert take(store) == {"LIST": 1}  # known-bad versions are not fetched again
    assert q.stats.corrupt_records == 4
    with pytest.raises(CorruptRecord, match="queue/jobs/garbage"):
        await q.get("garbage")
    assert [r.id for r in (await q.list()).records] == ["fine"]
    assert (await q.counts())[JobStatus.RUNNING] == 1
    assert await q.cancel("garbage")  # and an operator can remove it


HOSTILE_VALUES = {
    "run_at": [math.nan, math.inf, 1e20, -1e12],
    "lease_expires_at": [math.inf, 1e18, 2e9 + 86_400 * 365],
    "created_at": [math.nan, -math.inf],
    "updated_at": [1e20],
    "priority": [10, -1, 2**63],
    "max_attempts": [0, 2**62],
    "attempts": [-5, 10**7],
    "claims": [-1, 2**63],
    "rev": [-1, 2**63],
}
"""Values a record decodes with but no run could have written, by field."""


@pytest.mark.parametrize(
    ("field", "value"), [(f, v) for f, values in HOSTILE_VALUES.items() for v in values]
)
async def test_a_record_holding_a_value_no_run_could_write_is_named_and_skipped(
    backing: MemoryStore, clock: FakeClock, field: str, value: object
) -> None:
    """It is a record that cannot be read: named by its key and field, never
    claimed (nor claimed again and again), and the rest of the queue goes on."""
    q, _ = make(backing, clock, scan_interval=0.0)
    job = replace(_job("hostile"), run_at=clock.now(), created_at=clock.now())
    if field == "lease_expires_at":
        job = replace(job, token="0" * 24)
    await backing.put("queue/jobs/hostile", encode(replace(job, **{field: value})))
    await q.enqueue(b"", id="fine")
    assert [d.id for d in await q.claim(5, lease=30)] == ["fine"]
    assert await q.claim(5, lease=30) == []
    with pytest.raises(CorruptRecord, match="queue/jobs/hostile") as refused:
        await q.get("hostile")
    assert field in str(refused.value)


def _job(job_id: str) -> StoredJob:
    return StoredJob(
        id=job_id,
        kind="k",
        payload=b"payload",
        priority=5,
        max_attempts=3,
        run_at=1.0,
        created_at=1.0,
        updated_at=1.0,
        nonce="n",
    )


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_decoding_any_bytes_gives_a_record_or_corrupt_record(data: bytes) -> None:
    try:
        decode(data, key="queue/jobs/x")
    except CorruptRecord as exc:
        assert "queue/jobs/x" in str(exc)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=200))
def test_decoding_any_prefix_of_a_record_fails_cleanly(cut: int) -> None:
    data = encode(_job("x"))
    if cut >= len(data):
        assert decode(data, key="k").id == "x"
    else:
        with pytest.raises(CorruptRecord):
            decode(data[:cut], key="k")


def test_every_write_changes_the_bytes() -> None:
    """On S3 an etag is the body's MD5: identical bytes would let a stale swap win."""
    job = _job("x")
    renewed = job.next(1.0)  # same time, no field changed but the version
    assert encode(renewed) != encode(job)
    assert decode(encode(renewed), key="k") == renewed


@settings(max_examples=100, deadline=None)
@given(
    payload=st.binary(max_size=300),
    kind=st.text(max_size=40),
    error=st.none() | st.text(max_size=200),
    priority=st.integers(min_value=0, max_value=9),
)
def test_a_record_size_says_its_priority(
    payload: bytes, kind: str, error: str | None, priority: int
) -> None:
    """What a listing shows of a record is its size: records of each priority
    fall in different classes, whatever they hold and whatever their state."""
    job = replace(_job("x"), payload=payload, kind=kind, last_error=error, priority=priority)
    held = job.next(2.0, token="0" * 24, lease_expires_at=32.0)
    dead = job.next(2.0, dead=True, dead_reason="gave up")
    for record in (job, held, dead):
        data = encode(record)
        assert listed_priority(len(data)) == record.priority
        assert decode(data, key="k") == record


# -- configuration -----------------------------------------------------------------


def test_a_prefix_that_is_not_a_key_is_refused(backing: MemoryStore) -> None:
    with pytest.raises(ValueError, match="prefix"):
        StoreQueue(backing, prefix="../up")


async def test_two_queues_under_different_prefixes_do_not_see_each_other(
    backing: MemoryStore, clock: FakeClock
) -> None:
    a = StoreQueue(backing, prefix="tenant-a/queue", clock=clock, scan_interval=0)
    b = StoreQueue(backing, prefix="tenant-b/queue", clock=clock, scan_interval=0)
    await a.enqueue(b"", id="j")
    assert await b.claim(1, lease=30) == []
    assert await b.get("j") is None
    assert [d.id for d in await a.claim(1, lease=30)] == ["j"]


async def test_concurrent_claims_in_one_process_share_one_listing(
    backing: MemoryStore, clock: FakeClock
) -> None:
    a, _ = make(backing, clock)
    # A little latency, so the three claims really interleave, as on a network.
    b, b_store = make(FaultyStore(backing, latency=0.001), clock, scan_interval=0.0)
    for i in range(6):
        await a.enqueue(b"", id=f"j{i}")
    got = await asyncio.gather(*(b.claim(2, lease=30) for _ in range(3)))
    ids = [d.id for batch in got for d in batch]
    assert sorted(ids) == [f"j{i}" for i in range(6)]
    assert b_store.counts["LIST"] == 1


async def test_a_claim_elsewhere_of_a_job_seen_waiting_is_inferred_not_read(
    backing: MemoryStore, clock: FakeClock
) -> None:
    a, a_store = make(backing, clock, scan_interval=0.0)
    b, _ = make(backing, clock, scan_interval=0.0)
    for i in range(5):
        await a.enqueue(b"", id=f"j{i}")
    got = await b.claim(5, lease=30)
    take(a_store)
    assert await a.claim(5, lease=30) == []
    assert take(a_store) == {"LIST": 1}  # each new size is exactly a claim's: no GETs
    record = await a.get("j1")
    assert record is not None and record.status is JobStatus.RUNNING
    take(a_store)

    assert (
        await b.settle(got[0], Release()) is Settlement.RELEASED
    )  # a different size: read at once
    for d in got[1:4]:
        assert await b.settle(d, Ack()) is Settlement.ACKED  # gone from the listing: never read
    [d] = await a.claim(5, lease=30)
    assert d.id == got[0].id
    assert await a.settle(d, Ack()) is Settlement.ACKED
    assert take(a_store) == {"LIST": 1, "GET": 1, "PUT": 1, "DELETE": 1}

    # b's holder of the last one dies. a guessed its lease from its own (30 s); after
    # that it reads the record once and, the lease having lapsed, takes it.
    clock.advance(29)
    assert await a.claim(5, lease=30) == []
    assert take(a_store) == {"LIST": 1}
    clock.advance(2)
    [d] = await a.claim(5, lease=30)
    assert (d.id, d.attempt, d.lapses) == (got[4].id, 1, 1)
    assert take(a_store) == {"LIST": 1, "GET": 1, "PUT": 1}


async def test_suspended_jobs_cost_only_the_listing_and_a_claim_elsewhere_is_inferred(
    backing: MemoryStore, clock: FakeClock
) -> None:
    """docs/queue.md, "Suspended runs": while jobs sleep, a process that knows
    them reads none of them; when another process claims them, the new
    sizes say so, as for any waiting job."""
    a, a_store = make(backing, clock, scan_interval=0.0)
    b, _ = make(backing, clock, scan_interval=0.0)
    for i in range(5):
        await a.enqueue(b"", id=f"j{i}")
    for d in await a.claim(5, lease=30):
        await a.settle(d, Suspended(clock.now() + 3600, Wait(JobStatus.SLEEPING, "x")))
    take(a_store)
    for _ in range(3):
        clock.advance(600)
        assert await a.claim(5, lease=30) == []
    assert take(a_store) == {"LIST": 3}
    clock.advance(1800)
    assert len(await b.claim(5, lease=30)) == 5
    assert await a.claim(5, lease=30) == []
    assert take(a_store) == {"LIST": 1}


@pytest.mark.parametrize(
    ("first_look", "scan_interval"),
    [(10.0, 0.0), (31.0, 0.0), (31.0, 3600.0)],
    ids=["listed-within-the-lease", "listed-after-it", "a-race-lost-to-it"],
)
async def test_a_claim_elsewhere_that_lapsed_is_taken_at_the_next_claim_round(
    backing: MemoryStore, clock: FakeClock, first_look: float, scan_interval: float
) -> None:
    """The process that enqueued a job, learning of another's claim of it only
    by its size (in a listing, or by losing a race for it), counts that lease
    from when the record was written, not from when it happened to look: once
    the lease has lapsed, its next claim round takes the job."""
    a, _ = make(backing, clock, scan_interval=scan_interval)
    b, _ = make(backing, clock, scan_interval=0.0)
    await a.enqueue(b"", id="j")
    [held] = await b.claim(1, lease=30)  # and b's process dies
    clock.advance(first_look)
    if first_look < 30:
        assert await a.claim(1, lease=30) == []  # held elsewhere, as its size says
        clock.advance(31 - first_look)
    elif scan_interval:
        assert await a.claim(1, lease=30) == []  # its swap is refused: claimed elsewhere
    [d] = await a.claim(1, lease=30)
    assert (d.id, d.attempt, d.lapses) == ("j", 1, 1)
    assert await b.settle(held, Ack()) is Settlement.LOST


# -- writes whose answer is lost ---------------------------------------------------


def faulty(backing: MemoryStore, clock: FakeClock) -> tuple[StoreQueue, FaultyStore]:
    store = FaultyStore(backing, operations=WRITES)
    return StoreQueue(store, clock=clock, scan_interval=0.0), store


async def test_a_create_whose_answer_was_lost_is_still_ours(
    backing: MemoryStore, clock: FakeClock
) -> None:
    q, store = faulty(backing, clock)
    store.fail_next(1, after=True)
    made = await q.enqueue(b"p", id="j")
    assert made.created  # read back: the record holds our (unique) bytes
    assert not (await q.enqueue(b"p", id="j")).created
    store.fail_next(1, after=False)
    with pytest.raises(StoreUnavailable):
        await q.enqueue(b"p", id="k")  # it never landed: the caller may retry
    assert await q.get("k") is None
    assert (await q.enqueue(b"p", id="k")).created


async def test_transitions_whose_answer_was_lost_are_settled_not_lost(
    backing: MemoryStore, clock: FakeClock
) -> None:
    q, store = faulty(backing, clock)
    await q.enqueue(b"", id="j")
    store.fail_next(1, after=True)
    [d] = await q.claim(1, lease=30)
    record = await q.get("j")
    assert record is not None and record.status is JobStatus.RUNNING
    store.fail_next(1, after=True)
    assert await q.renew(d, 60) == clock.now() + 60
    store.fail_next(1, after=True)
    assert await q.settle(d, Retry(0)) is Settlement.RETRIED
    [d] = await q.claim(1, lease=30)
    assert d.attempt == 2
    store.fail_next(1, after=False)
    with pytest.raises(StoreUnavailable):
        await q.settle(d, Ack())  # nothing happened; the worker retries the settlement
    store.fail_next(1, after=True)
    assert await q.settle(d, Ack()) is Settlement.ACKED
    assert await q.get("j") is None


async def test_a_queue_on_a_store_that_loses_answers_still_runs_each_job_once(
    backing: MemoryStore, clock: FakeClock
) -> None:
    """Writes fail at random, half of them after landing; every call is retried
    until it answers, as the worker does. Nothing is lost, run twice or mis-settled."""
    q = StoreQueue(
        FaultyStore(backing, operations=WRITES, error_rate=0.3, seed=7),
        clock=clock,
        scan_interval=0.0,
    )

    async def retried(call: Callable[[], Awaitable[T]]) -> T:
        for _ in range(50):
            try:
                return await call()
            except StoreUnavailable:
                continue
        raise AssertionError("the store never answered")

    for i in range(40):
        made = await retried(lambda i=i: q.enqueue(b"", id=f"j{i:02}"))  # type: ignore[misc]
        assert made.created
    delivered: Counter[str] = Counter()
    while await q.counts() != dict.fromkeys(QUEUE_STATUSES, 0):
        for d in await retried(lambda: q.claim(7, lease=30)):
            delivered[d.id] += 1
            assert await retried(lambda d=d: q.settle(d, Ack())) is Settlement.ACKED  # type: ignore[misc]
    assert delivered == Counter({f"j{i:02}": 1 for i in range(40)})


# -- the cache and its index against the store's truth -----------------------------

Op = tuple[Any, Any, Any, Any]
"""One random operation: a name and up to three arguments."""

_op = st.one_of(
    st.tuples(
        st.just("enqueue"), st.integers(0, 7), st.integers(0, 9), st.sampled_from([0, 0, 5, 20])
    ),
    st.tuples(
        st.just("claim"),
        st.integers(1, 4),
        st.sampled_from([5, 30]),
        st.sampled_from(["", "a", "*"]),
    ),
    st.tuples(st.just("claim-b"), st.integers(1, 4), st.sampled_from([5, 30]), st.just("*")),
    st.tuples(st.just("advance"), st.sampled_from([1, 5, 12, 40]), st.just(0), st.just(0)),
    st.tuples(
        st.just("settle"),
        st.integers(0, 20),
        st.sampled_from(
            ["ack", "nack", "nack-later", "uncounted", "release", "dead", "renew", "suspend"]
        ),
        st.just(0),
    ),
    st.tuples(
        st.sampled_from(["cancel", "requeue", "wake", "wake-b"]),
        st.integers(0, 7),
        st.just(0),
        st.just(0),
    ),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_op, max_size=40))
def test_claims_follow_the_store_truth_under_any_sequence(ops: list[Op]) -> None:
    """Drive one StoreQueue at random; before each claim, work out from the
    store alone (via a second instance's ``list``) which jobs are due and in
    what order, and check the claim took the first of them; check every
    settlement's answer against whether its token is still current."""
    asyncio.run(_drive(ops))


async def _drive(ops: list[Op]) -> None:
    clock = FakeClock()
    backing = MemoryStore(clock=clock.now)
    q = StoreQueue(backing, clock=clock, scan_interval=0, priority_aging=10)
    b = StoreQueue(backing, clock=clock, scan_interval=0, priority_aging=10)
    truth = StoreQueue(backing, clock=clock, scan_interval=0, priority_aging=10)
    b_active = False
    held: list[Delivery] = []
    current: dict[str, str] = {}  # id -> the token that owns it now
    for op, x, y, z in ops:
        now = clock.now()
        if op == "enqueue":
            kind = "a" if x % 2 else "b"
            await q.enqueue(b"p", id=f"j{x}", kind=kind, priority=int(y), run_at=now + int(z))
        elif op == "advance":
            clock.advance(int(x))
        elif op in ("claim", "claim-b"):
            kinds = None if z == "*" else [str(z) or "b"]
            records = (await truth.list(limit=1000)).records
            due = sorted(
                r.run_at + r.priority * 10
                for r in records
                if (kinds is None or r.kind in kinds)
                and (
                    r.status is JobStatus.READY
                    or (r.status is JobStatus.RUNNING and (r.lease_expires_at or 0) <= now)
                )
            )
            claimer = q if op == "claim" else b
            got = await claimer.claim(int(x), lease=float(y), kinds=kinds)
            keys = sorted(d.priority * 10 + _run_at(records, d.id) for d in got)
            if op == "claim" and not b_active:
                assert keys == due[: int(x)]  # what it knows is all there is: exact order
            else:
                # Views that b changed under q are stale and guessed: q may
                # claim fewer, or other due jobs, but never one not due.
                assert len(got) <= int(x) and all(k in due for k in keys)
            b_active = b_active or op == "claim-b"
            for d in got:
                before = next(r for r in records if r.id == d.id)
                # A takeover of a lapsed lease counts a lapse; a claim, an attempt.
                takeover = before.status is JobStatus.RUNNING
                assert (d.attempt, d.lapses) == (
                    (before.attempts, before.lapses + 1)
                    if takeover
                    else (before.attempts + 1, before.lapses)
                )
                current[d.id] = d.token
            held += got
        elif op == "settle" and held:
            d = held[int(x) % len(held)]
            owned = current.get(d.id) == d.token
            record = await truth.get(d.id)
            if y == "renew":
                assert (await q.renew(d, 50) is not None) == owned
                continue
            if y == "ack":
                result = await q.settle(d, Ack())
            elif y in ("nack", "nack-later", "uncounted"):
                result = await q.settle(d, Retry(0 if y == "nack" else 7, count=y != "uncounted"))
            elif y == "release":
                result = await q.settle(d, Release())
            elif y == "suspend":
                result = await q.settle(d, Suspended(now + 7, Wait(JobStatus.SLEEPING)))
            else:
                result = await q.settle(d, Dead("x"))
            assert (result is not Settlement.LOST) == owned, (op, y, d.id)
            if owned:
                del current[d.id]
                assert record is not None
                if y == "nack" and record.attempts >= record.max_attempts:
                    assert result is Settlement.DEAD
            else:
                assert await truth.get(d.id) == record  # a stale token changes nothing
        elif op in ("cancel", "requeue", "wake", "wake-b"):
            job_id = f"j{x}"
            if op == "cancel":
                await q.cancel(job_id)
                current.pop(job_id, None)
            elif op == "requeue":
                await q.requeue(job_id)
            else:
                record = await truth.get(job_id)
                waker = q if op == "wake" else b
                b_active = b_active or op == "wake-b"
                woke = await waker.wake(job_id, JobStatus.SLEEPING)
                assert woke == (record is not None and record.status is not JobStatus.DEAD)
        # Where a cache holds the store's current version, it holds it exactly.
        for info in await backing.list("queue/jobs/"):
            stored = decode((await backing.get(info.key)).data, key=info.key)
            for queue in (q, b):
                seen = queue._cache.get(stored.id)
                if seen and seen.etag == info.etag and seen.job and not seen.guessed:
                    expected = stored.stripped() if seen.job.partial else stored
                    assert seen.job == expected


def _run_at(records: list[JobRecord], job_id: str) -> float:
    return next(r.run_at for r in records if r.id == job_id)


async def test_a_process_that_only_enqueues_does_not_remember_every_job(
    backing: MemoryStore, clock: FakeClock
) -> None:
    producer = StoreQueue(
        backing, clock=clock, max_cache_entries=10, max_cache_bytes=2000, scan_interval=0
    )
    for i in range(50):
        await producer.enqueue(b"x" * 100, id=f"j{i:02}")
    assert len(producer._cache) == 10
    assert producer._cache.payload_bytes == sum(
        len(s.job.payload) for s in producer._cache.values() if s.job
    )
    small = StoreQueue(backing, clock=clock, max_cache_bytes=450)
    for i in range(10):
        await small.enqueue(b"y" * 100, id=f"k{i}")
    assert small._cache.payload_bytes <= 450
    # What it forgot it reads again when it needs it: nothing is lost.
    seen: set[str] = set()
    while batch := await producer.claim(16, lease=30):
        for d in batch:
            seen.add(d.id)
            assert await producer.settle(d, Ack()) is Settlement.ACKED
    assert len(seen) == 60


async def test_processes_walk_a_burst_they_read_in_different_orders(
    backing: MemoryStore, clock: FakeClock
) -> None:
    """So that they do not race for the same job at every claim; the writer
    itself, and priorities, keep exact order."""
    a = StoreQueue(backing, clock=clock, scan_interval=0)
    for i in range(20):
        await a.enqueue(b"", id=f"j{i:02}")
    await a.enqueue(b"", id="urgent", priority=0)
    orders = []
    for q in (StoreQueue(backing, clock=clock, scan_interval=0) for _ in range(2)):
        # It lists, and reads all 21: a claim reads as many as it asks for.
        assert await q.claim(100, lease=30, kinds=["nothing"]) == []
        orders.append(q._candidates(clock.now(), None, 100))
    assert a._candidates(clock.now(), None, 100) == ["urgent"] + [f"j{i:02}" for i in range(20)]
    assert orders[0][0] == orders[1][0] == "urgent"
    assert orders[0] != orders[1]
    assert sorted(orders[0]) == sorted(orders[1])


async def test_an_idle_queue_lists_less_often_until_work_appears(
    backing: MemoryStore, clock: FakeClock
) -> None:
    """Empty listings in a row double the wait (up to idle_scan_max); work made
    here, or found by a listing, brings back the usual pace."""
    q, store = make(backing, clock, scan_interval=0.01, idle_scan_max=0.16)
    lists = 0
    deadline = asyncio.get_running_loop().time() + 0.6
    while asyncio.get_running_loop().time() < deadline:
        assert await q.claim(4, lease=30) == []
        lists += take(store).get("LIST", 0)
        await asyncio.sleep(0.002)
    # Without the backoff: ~60 listings (one per 10 ms). With it, the waits
    # go 10, 20, 40, 80, 160, 160... ms: about 7.
    assert 3 <= lists <= 12, lists

    other, _ = make(backing, clock, scan_interval=0.01)
    await other.enqueue(b"from another process", id="remote")

    async def found() -> bool:
        return len(await q.claim(1, lease=30)) == 1

    await wait_until(found, timeout=30, message="the idle queue to look again")


# -- what a process knows without asking -------------------------------------------


async def test_pending_here_follows_this_instances_own_writes(
    backing: MemoryStore, clock: FakeClock
) -> None:
    """A job this instance enqueued, or holds, is known pending (so a handle
    awaiting it need not poll); once acked, or with its lease lapsed, it is not."""
    a, _ = make(backing, clock)
    await a.enqueue(b"", id="mine")
    assert a.pending_here("mine")
    (held,) = await a.claim(1, lease=30)
    assert a.pending_here("mine")
    clock.advance(31)
    assert not a.pending_here("mine"), "a lapsed lease may have let a peer finish it"
    (held,) = await a.claim(1, lease=30)
    await a.settle(held, Ack())
    assert not a.pending_here("mine")
    assert not a.pending_here("never-enqueued")


async def test_pending_here_is_false_for_a_job_a_peer_holds(
    backing: MemoryStore, clock: FakeClock
) -> None:
    a, _ = make(backing, clock, scan_interval=0.0)
    b, _ = make(backing, clock, scan_interval=0.0)
    await a.enqueue(b"", id="shared")
    assert not b.pending_here("shared"), "b has not looked yet"
    (held,) = await b.claim(1, lease=30)
    assert b.pending_here("shared")
    # a still remembers its own write until it looks again...
    assert a.pending_here("shared")
    assert await a.claim(1, lease=30) == []
    # ...and after looking, it knows a peer has the job.
    assert not a.pending_here("shared")
    await b.settle(held, Ack())


async def test_pending_here_trusts_a_look_only_for_a_few_seconds(
    backing: MemoryStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    import stepstone.runtime.store_queue.queue as module

    a, _ = make(backing, clock)
    await a.enqueue(b"", id="mine")
    monkeypatch.setattr(module, "PENDING_HINT_SECONDS", 0.0)
    assert not a.pending_here("mine")
