"""RetryPolicy, FaultyStore and CountingStore: the pieces reliability tests and benchmarks use."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

from stepstone.store import (
    AlreadyExists,
    CountingStore,
    FaultyStore,
    FileStore,
    MemoryStore,
    NotFound,
    PreconditionFailed,
    RetryPolicy,
    StoreUnavailable,
)
from stepstone.store.counting import KINDS

# -- RetryPolicy -------------------------------------------------------------------


def test_delays_are_full_jitter_under_a_capped_exponential() -> None:
    policy = RetryPolicy(attempts=8, base=0.1, cap=1.0, rng=random.Random(1))
    ceilings = [policy.ceiling(n) for n in range(1, 8)]
    assert ceilings == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    for _ in range(200):
        delays = list(policy.delays())
        assert len(delays) == 7
        assert all(0 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert policy.worst_case() == pytest.approx(sum(ceilings))


def test_delays_are_deterministic_with_a_seeded_rng() -> None:
    a = list(RetryPolicy(rng=random.Random(5)).delays())
    b = list(RetryPolicy(rng=random.Random(5)).delays())
    c = list(RetryPolicy(rng=random.Random(6)).delays())
    assert a == b != c


def test_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(base=-1)


async def test_run_retries_only_retryable_errors_and_stops_at_the_bound() -> None:
    waits: list[float] = []

    async def sleep(d: float) -> None:
        waits.append(d)

    policy = RetryPolicy(attempts=3, base=0.01, cap=0.01)
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise StoreUnavailable("blip")
        return "ok"

    assert await policy.run(flaky, sleep=sleep) == "ok"
    assert (calls, len(waits)) == (3, 2)

    calls = 0

    async def down() -> str:
        nonlocal calls
        calls += 1
        raise StoreUnavailable("down")

    with pytest.raises(StoreUnavailable):
        await policy.run(down, sleep=sleep)
    assert calls == 3

    calls = 0

    async def answer() -> str:
        nonlocal calls
        calls += 1
        raise PreconditionFailed("lost the race")

    with pytest.raises(PreconditionFailed):
        await policy.run(answer, sleep=sleep)
    assert calls == 1


# -- FaultyStore ------------------------------------------------------------------------


async def test_failures_before_the_call_change_nothing() -> None:
    inner = MemoryStore()
    store = FaultyStore(inner, error_rate=1.0, after=0.0, seed=1)
    with pytest.raises(StoreUnavailable, match="injected"):
        await store.put("k", b"x")
    with pytest.raises(NotFound):
        await inner.get("k")
    assert store.injected[("put", "before")] == 1


async def test_failures_after_the_call_lose_only_the_answer() -> None:
    inner = MemoryStore()
    store = FaultyStore(inner, error_rate=1.0, after=1.0, seed=1)
    with pytest.raises(StoreUnavailable):
        await store.put_if_absent("k", b"x")
    assert (await inner.get("k")).data == b"x"  # it landed
    # A naive retry of the create now meets its own write:
    with pytest.raises(AlreadyExists):
        await FaultyStore(inner).put_if_absent("k", b"x")


async def test_only_chosen_operations_fail() -> None:
    store = FaultyStore(MemoryStore(), error_rate=1.0, operations={"put"}, seed=1)
    with pytest.raises(StoreUnavailable):
        await store.put("k", b"x")
    await store.put_if_absent("k", b"x")
    assert (await store.get("k")).data == b"x"
    assert [i.key for i in await store.list()] == ["k"]
    with pytest.raises(ValueError, match="unknown operations"):
        FaultyStore(MemoryStore(), operations={"gett"})


async def pattern(seed: int, rate: float = 0.3, n: int = 300) -> list[str]:
    store = FaultyStore(MemoryStore(), error_rate=rate, seed=seed)
    out = []
    for i in range(n):
        try:
            await store.put(f"k{i}", b"x")
            out.append("ok")
        except StoreUnavailable as exc:
            out.append("after" if "(after)" in str(exc) else "before")
    return out


async def test_faults_are_deterministic_with_a_seed_and_near_the_rate() -> None:
    a, b, c = await pattern(7), await pattern(7), await pattern(8)
    assert a == b
    assert a != c
    failed = sum(1 for r in a if r != "ok")
    assert 60 <= failed <= 120  # 30% of 300, give or take
    assert {"before", "after"} <= set(a)


async def test_down_and_up() -> None:
    inner = MemoryStore()
    store = FaultyStore(inner)
    await store.put("k", b"1")
    store.down()
    assert store.is_down
    for call in (store.get("k"), store.put("k", b"2"), store.list(), store.delete("k")):
        with pytest.raises(StoreUnavailable):
            await call
    assert (await inner.get("k")).data == b"1"
    store.up()
    assert (await store.get("k")).data == b"1"
    assert store.injected[("get", "down")] == 1


async def test_fail_next_and_retry_policy_together() -> None:
    store = FaultyStore(MemoryStore())
    store.fail_next(2)
    policy = RetryPolicy(attempts=3, base=0.001, cap=0.001)
    etag = await policy.run(lambda: store.put("k", b"x"))
    assert (await store.get("k")).etag == etag
    assert store.injected[("put", "before")] == 2
    store.fail_next(3)
    with pytest.raises(StoreUnavailable):
        await policy.run(lambda: store.get("k"))


async def test_latency_is_added() -> None:
    store = FaultyStore(MemoryStore(), latency=0.05)
    start = time.monotonic()
    await store.put("k", b"x")
    assert time.monotonic() - start >= 0.05
    ranged = FaultyStore(MemoryStore(), latency=(0.01, 0.02), seed=3)
    start = time.monotonic()
    await asyncio.gather(*(ranged.put(f"k{i}", b"x") for i in range(10)))
    assert time.monotonic() - start >= 0.01  # concurrent: added latency overlaps


# -- CountingStore --------------------------------------------------------------------------


async def test_counts_requests_by_kind(tmp_path: Path) -> None:
    store = CountingStore(FileStore(tmp_path / "s"))
    assert dict(store.counts) == dict.fromkeys(KINDS, 0)
    etag = await store.put("a", b"1")
    await store.put_if_absent("b", b"1")
    await store.put_if_match("a", b"2", etag)
    await store.get("a")
    await store.head("b")
    await store.list()
    await store.delete("b")
    with pytest.raises(AlreadyExists):
        await store.put_if_absent("a", b"3")  # a failed request is still a request
    assert store.counts == {
        "GET": 1,
        "HEAD": 1,
        "PUT": 1,
        "CONDITIONAL_PUT": 3,
        "LIST": 1,
        "DELETE": 1,
    }
    assert store.total == 8
    assert store.location == store.inner.location
    store.reset()
    assert store.total == 0
    _ = [i async for i in store.scan(page_size=1)]  # 1 object: pages of 1, then an empty one
    assert store.counts["LIST"] == 2
    await store.close()
