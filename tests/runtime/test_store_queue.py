"""StoreQueue beyond the shared contract: what it costs in store requests,
how it treats records it cannot read, and how its view stays small and right.

Request counts are the product here (on S3 they are the bill), so they are
asserted exactly for one process and bounded for several. docs/queue.md
quotes these numbers; ``test_print_request_table`` prints them.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import FakeClock, JobStatus, Settlement
from runtime.store_queue import StoreQueue
from runtime.store_records import CorruptRecord, StoredJob, decode, encode
from store import MemoryStore, ObjectInfo, ObjectStore, StoredObject


class CountingStore(ObjectStore):
    """Counts the requests that reach ``inner``, by S3 verb.

    ``put``, ``put_if_absent`` and ``put_if_match`` are all one PUT on S3, and
    ``scan`` is one LIST per page (the base class pages through ``list``).
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.location = inner.location
        self.requests: Counter[str] = Counter()
        self.yields = False
        """Let other tasks run before each request, as a networked store would."""

    def take(self) -> dict[str, int]:
        """The counts since the last take, without zeros."""
        out = {verb: n for verb, n in self.requests.items() if n}
        self.requests.clear()
        return out

    async def _count(self, verb: str) -> None:
        self.requests[verb] += 1
        if self.yields:
            await asyncio.sleep(0)

    async def get(self, key: str) -> StoredObject:
        await self._count("GET")
        return await self.inner.get(key)

    async def head(self, key: str) -> ObjectInfo:
        await self._count("HEAD")
        return await self.inner.head(key)

    async def put(self, key: str, data: bytes) -> str:
        await self._count("PUT")
        return await self.inner.put(key, data)

    async def put_if_absent(self, key: str, data: bytes) -> str:
        await self._count("PUT")
        return await self.inner.put_if_absent(key, data)

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        await self._count("PUT")
        return await self.inner.put_if_match(key, data, etag)

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        await self._count("DELETE")
        await self.inner.delete(key, if_match=if_match)

    async def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int = 1000
    ) -> list[ObjectInfo]:
        await self._count("LIST")
        return await self.inner.list(prefix, start_after=start_after, limit=limit)


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
    assert store.take() == {"PUT": 1}
    assert not (await q.enqueue(b"p", id="a")).created
    assert store.take() == {"PUT": 1}  # the refused create-if-absent
    await q.enqueue(b"p", id="b")
    store.take()

    [d] = await q.claim(1, lease=30)
    assert store.take() == {"PUT": 1}  # from the view: no LIST, no GET
    assert await q.renew(d, 60) is not None
    assert store.take() == {"PUT": 1}
    assert await q.renew(d, 1) is not None  # would not extend: a HEAD confirms the token
    assert store.take() == {"HEAD": 1}
    assert await q.nack(d, delay=0) is Settlement.RETRIED
    assert store.take() == {"PUT": 1}
    [d] = await q.claim(1, lease=30)
    assert await q.release(d) is Settlement.RELEASED
    assert store.take() == {"PUT": 2}
    [d] = await q.claim(1, lease=30)
    assert await q.ack(d) is Settlement.ACKED
    assert store.take() == {"PUT": 1, "DELETE": 1}

    [d] = await q.claim(1, lease=30)
    assert await q.dead_letter(d, "x") is Settlement.DEAD
    assert store.take() == {"PUT": 2}
    assert await q.requeue("b")
    assert store.take() == {"GET": 1, "PUT": 1}
    assert await q.cancel("b")
    assert store.take() == {"DELETE": 1}  # the view knows its etag
    assert not await q.cancel("b")
    assert store.take() == {"HEAD": 1}


async def test_a_process_working_its_own_jobs_lists_rarely_and_never_gets(
    backing: MemoryStore, clock: FakeClock
) -> None:
    q, store = make(backing, clock, scan_interval=3600.0)
    for i in range(200):
        await q.enqueue(b"x" * 100, id=f"j{i:03}")
    assert store.take() == {"PUT": 200}
    done = 0
    while done < 200:
        batch = await q.claim(8, lease=30)
        assert batch
        for d in batch:
            assert await q.ack(d) is Settlement.ACKED
            done += 1
    # The view served every claim: no listing, no read.
    assert store.take() == {"PUT": 200, "DELETE": 200}
    assert await q.claim(8, lease=30) == []  # an empty view: this one lists
    assert store.take() == {"LIST": 1}
    assert await q.claim(8, lease=30) == []  # inside scan_interval: no LIST
    assert store.take() == {}


async def test_an_empty_queue_lists_once_per_scan_interval(
    backing: MemoryStore, clock: FakeClock
) -> None:
    q, store = make(backing, clock, scan_interval=0.2)
    assert await q.claim(4, lease=30) == []
    assert store.take() == {"LIST": 1}
    for _ in range(20):
        assert await q.claim(4, lease=30) == []
    assert store.take() == {}
    await asyncio.sleep(0.25)  # the interval is real time: request cost, not job time
    assert await q.claim(4, lease=30) == []
    assert store.take() == {"LIST": 1}


# -- requests, several processes ---------------------------------------------


async def test_another_process_reads_each_record_once_per_change_it_sees(
    backing: MemoryStore, clock: FakeClock
) -> None:
    a, a_store = make(backing, clock, scan_interval=0.0)
    b, b_store = make(backing, clock, scan_interval=0.0)
    for i in range(10):
        await a.enqueue(b"", id=f"j{i}")
    assert a_store.take() == {"PUT": 10}
    got = await b.claim(10, lease=30)
    assert len(got) == 10
    assert b_store.take() == {"LIST": 1, "GET": 10, "PUT": 10}
    for d in got:
        await b.ack(d)
    assert b_store.take() == {"DELETE": 10}
    # a's view still holds them as ready, but not confirmed within
    # scan_interval: it lists before swapping, and sees them gone.
    assert await a.claim(10, lease=30) == []
    assert a_store.take() == {"LIST": 1}
    assert a.stats.lost_races == 0


async def test_a_lost_race_costs_one_refused_put_and_a_listing(
    backing: MemoryStore, clock: FakeClock
) -> None:
    a, a_store = make(backing, clock, scan_interval=3600.0)
    b, _ = make(backing, clock, scan_interval=0.0)
    await a.enqueue(b"", id="taken")
    await a.enqueue(b"", id="free", priority=9)
    [first] = await b.claim(1, lease=30)
    assert first.id == "taken"
    a_store.take()
    # a tries "taken" from its stale view and loses; a refused swap costs
    # what a listing does, so it lists (learning, from the size alone, that
    # "taken" was claimed: no GET) before it swaps "free".
    [d] = await a.claim(1, lease=30)
    assert d.id == "free"
    assert a_store.take() == {"PUT": 2, "LIST": 1}
    assert a.stats.lost_races == 1


async def test_another_holder_renewing_is_not_reread_until_its_lease_would_lapse(
    backing: MemoryStore, clock: FakeClock
) -> None:
    a, _ = make(backing, clock, scan_interval=0.0)
    b, b_store = make(backing, clock, scan_interval=0.0)
    await a.enqueue(b"", id="long")
    [d] = await a.claim(1, lease=30)
    assert await b.claim(1, lease=30) == []
    assert b_store.take() == {"LIST": 1, "GET": 1}
    for _ in range(2):
        clock.advance(10)
        assert await a.renew(d, 30) is not None
        assert await b.claim(1, lease=30) == []
        assert b_store.take() == {"LIST": 1}  # a renewal: same size, lease not lapsed
    clock.advance(15)  # past the lease b saw (but a renewed it): b reads it once
    assert await b.claim(1, lease=30) == []
    assert b_store.take() == {"LIST": 1, "GET": 1}
    assert await b.claim(1, lease=30) == []
    assert b_store.take() == {"LIST": 1}
    # A settlement changes the size: b reads it at once.
    assert await a.nack(d, delay=0) is Settlement.RETRIED
    [again] = await b.claim(1, lease=30)
    assert again.attempt == 2
    assert b_store.take() == {"LIST": 1, "GET": 1, "PUT": 1}


async def test_records_held_elsewhere_or_dead_keep_no_payload_in_the_view(
    backing: MemoryStore, clock: FakeClock
) -> None:
    a, _ = make(backing, clock)
    b, _ = make(backing, clock, scan_interval=0.0)
    await a.enqueue(b"big" * 100, id="held")
    await a.enqueue(b"big" * 100, id="dead")
    await a.enqueue(b"big" * 100, id="ready", priority=9)
    [held] = await a.claim(1, lease=30)
    [dead] = await a.claim(1, lease=30)
    await a.dead_letter(dead, "x")
    assert await b.claim(1, lease=30, kinds=["other"]) == []
    view = b._view
    assert {i: view[i].job.payload == b"" for i in view if view[i].job} == {  # type: ignore[union-attr]
        "held": True,
        "dead": True,
        "ready": False,
    }
    assert held.payload == b"big" * 100


# -- records that will not decode ----------------------------------------------


async def test_a_garbage_record_is_skipped_counted_and_named(
    backing: MemoryStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    q, store = make(backing, clock, scan_interval=0.0)
    await backing.put("queue/jobs/garbage", b"\xc1 not msgpack")
    good = encode(_job("truncated"))
    await backing.put("queue/jobs/truncated", good[: len(good) // 2])
    await backing.put("queue/jobs/wrong-id", encode(_job("someone-else")))
    await q.enqueue(b"", id="fine")
    [d] = await q.claim(5, lease=30)
    assert d.id == "fine"
    assert q.stats.corrupt_records == 3
    assert q.stats.corrupt_keys == {
        "queue/jobs/garbage",
        "queue/jobs/truncated",
        "queue/jobs/wrong-id",
    }
    assert "queue/jobs/garbage" in caplog.text
    store.take()
    assert await q.claim(5, lease=30) == []
    assert store.take() == {"LIST": 1}  # known-bad versions are not fetched again
    assert q.stats.corrupt_records == 3
    with pytest.raises(CorruptRecord, match="queue/jobs/garbage"):
        await q.get("garbage")
    assert [r.id for r in (await q.list()).records] == ["fine"]
    assert (await q.counts())[JobStatus.CLAIMED] == 1
    assert await q.cancel("garbage")  # and an operator can remove it


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
    b, b_store = make(backing, clock, scan_interval=0.0)
    b_store.yields = True
    for i in range(6):
        await a.enqueue(b"", id=f"j{i}")
    got = await asyncio.gather(*(b.claim(2, lease=30) for _ in range(3)))
    ids = [d.id for batch in got for d in batch]
    assert sorted(ids) == [f"j{i}" for i in range(6)]
    assert b_store.requests["LIST"] == 1


async def test_a_claim_elsewhere_of_a_job_seen_waiting_is_inferred_not_read(
    backing: MemoryStore, clock: FakeClock
) -> None:
    a, a_store = make(backing, clock, scan_interval=0.0)
    b, _ = make(backing, clock, scan_interval=0.0)
    for i in range(5):
        await a.enqueue(b"", id=f"j{i}")
    got = await b.claim(5, lease=30)
    a_store.take()
    assert await a.claim(5, lease=30) == []
    assert a_store.take() == {"LIST": 1}  # each new size is exactly a claim's: no GETs
    record = await a.get("j1")
    assert record is not None and record.status is JobStatus.CLAIMED
    a_store.take()

    assert await b.release(got[0]) is Settlement.RELEASED  # a different size: read at once
    for d in got[1:4]:
        assert await b.ack(d) is Settlement.ACKED  # gone from the listing: never read
    [d] = await a.claim(5, lease=30)
    assert d.id == "j0"
    assert await a.ack(d) is Settlement.ACKED
    assert a_store.take() == {"LIST": 1, "GET": 1, "PUT": 1, "DELETE": 1}

    # b's holder of j4 dies. a guessed its lease from its own (30 s); after
    # that it reads the record once and, the lease having lapsed, takes it.
    clock.advance(29)
    assert await a.claim(5, lease=30) == []
    assert a_store.take() == {"LIST": 1}
    clock.advance(2)
    [d] = await a.claim(5, lease=30)
    assert (d.id, d.attempt) == ("j4", 2)
    assert a_store.take() == {"LIST": 1, "GET": 1, "PUT": 1}
