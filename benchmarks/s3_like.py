"""S3LikeStore: any store, answering with S3's latency and per-prefix limits.

For the fleet simulation (benchmarks/fleet.py): many workers in one process
against a store that behaves, in time, like one S3 bucket, so that what
grows with the fleet shows up without a fleet.

- **Latency**: every request waits a round trip drawn uniformly from
  ``latency`` (20 to 60 ms by default) from ``random.Random(seed)``, before
  the inner store answers.
- **Per-prefix limits**: S3 serves 3,500 PUT/COPY/POST/DELETE and 5,500
  GET/HEAD requests a second per partitioned prefix. Each partition here
  has a token bucket per class (writes: PUT, conditional PUT, DELETE;
  reads: GET, HEAD and LIST, which is a GET on the bucket), refilled at
  ``rates`` per second times ``scale``, holding at most a tenth of a
  second's worth. A request that finds its bucket empty is answered
  SlowDown after its round trip, as S3 does, and the client does what
  ``S3Store`` does: it retries (stepstone.store.wrappers.retry.RetryPolicy: full
  jitter from 50 ms, five tries, then StoreUnavailable to the engine), and
  every request first waits on the adaptive send rate of its partition
  (stepstone.store.wrappers.throttle.AdaptiveRates: cut when a retry is refused
  too, once per congestion event, grown back on successes;
  ``adaptive=False`` turns it off, as ``S3Store`` allows).
- **Partitions**: a key's partition is its first segment (``queue``,
  ``memos``, ``outcomes``): a fresh bucket's. S3 splits a prefix that stays
  hot into more partitions over minutes; a fleet that must work from the
  first minute plans on the unsplit one.

``counts`` has the requests by (class, partition) and ``slowdowns`` the
SlowDown answers, which the engine does not see and CountingStore does not
count (S3 does not bill a 503).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from stepstone.store import DEFAULT_PAGE_SIZE, ObjectInfo, ObjectStore, StoredObject
from stepstone.store.errors import StoreUnavailable
from stepstone.store.wrappers.retry import RetryPolicy
from stepstone.store.wrappers.throttle import AdaptiveRates

T = TypeVar("T")

S3_RATES = {"write": 3500.0, "read": 5500.0}
"""S3's requests a second per partitioned prefix, by class."""


def first_segment(key: str) -> str:
    """The partition of a fresh bucket: the key's first segment."""
    return key.split("/", 1)[0]


@dataclass(slots=True)
class _Bucket:
    """A token bucket: ``rate`` tokens a second, at most ``burst`` held."""

    rate: float
    burst: float
    tokens: float
    stamp: float = field(default_factory=time.monotonic)

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


class SlowDown(StoreUnavailable):
    """S3's 503 SlowDown: the partition is over its request rate."""


class S3LikeStore(ObjectStore):
    """Wraps ``inner`` with S3's latency and per-prefix limits (module docstring).
    ``scale`` multiplies the limits (0.1: a tenth of S3's rates); None turns
    them off."""

    def __init__(
        self,
        inner: ObjectStore,
        *,
        latency: tuple[float, float] = (0.020, 0.060),
        scale: float | None = 1.0,
        partition: Callable[[str], str] = first_segment,
        seed: int = 0,
        retry: RetryPolicy | None = None,
        adaptive: bool = True,
    ) -> None:
        self.inner = inner
        self.location = inner.location
        self.key_limit = inner.key_limit
        self.remote = True  # (as S3 is: requests are what it counts)
        self.latency = latency
        self.scale = scale
        self.partition = partition
        self.rng = random.Random(seed)
        self.retry = retry or RetryPolicy(rng=random.Random(seed + 1))
        self.send_rates = AdaptiveRates() if adaptive else None
        self.counts: Counter[str] = Counter()
        self.slowdowns: Counter[str] = Counter()
        self._buckets: dict[tuple[str, str], _Bucket] = {}

    def _bucket(self, kind: str, part: str) -> _Bucket | None:
        if self.scale is None:
            return None
        bucket = self._buckets.get((kind, part))
        if bucket is None:
            rate = S3_RATES[kind] * self.scale
            burst = max(1.0, rate / 10)
            bucket = self._buckets[(kind, part)] = _Bucket(rate, burst, burst)
        return bucket

    async def _request(self, kind: str, key: str, call: Callable[[], Awaitable[T]]) -> T:
        part = self.partition(key)
        refused = 0  # this request's last tries refused SlowDown, in a row
        rate = None if self.send_rates is None else self.send_rates.of(key)

        async def once() -> T:
            nonlocal refused
            sent = 0.0 if rate is None else await rate.acquire()
            await asyncio.sleep(self.rng.uniform(*self.latency))
            bucket = self._bucket(kind, part)
            throttled = bucket is not None and not bucket.take()
            refused = refused + 1 if throttled else 0
            if rate is not None:
                rate.record(sent=sent, refused=refused)
            if throttled:
                self.slowdowns[f"{kind} {part}"] += 1
                raise SlowDown("SlowDown", location=self.location, key=key)
            self.counts[f"{kind} {part}"] += 1
            return await call()

        return await self.retry.run(once, retryable=lambda e: isinstance(e, SlowDown))

    async def get(self, key: str) -> StoredObject:
        return await self._request("read", key, lambda: self.inner.get(key))

    async def head(self, key: str) -> ObjectInfo:
        return await self._request("read", key, lambda: self.inner.head(key))

    async def put(self, key: str, data: bytes) -> str:
        return await self._request("write", key, lambda: self.inner.put(key, data))

    async def put_if_absent(self, key: str, data: bytes) -> str:
        return await self._request("write", key, lambda: self.inner.put_if_absent(key, data))

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return await self._request("write", key, lambda: self.inner.put_if_match(key, data, etag))

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        await self._request("write", key, lambda: self.inner.delete(key, if_match=if_match))

    async def list(
        self,
        prefix: str = "",
        *,
        start_after: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
    ) -> list[ObjectInfo]:
        return await self._request(
            "read", prefix, lambda: self.inner.list(prefix, start_after=start_after, limit=limit)
        )

    async def close(self) -> None:
        await self.inner.close()
