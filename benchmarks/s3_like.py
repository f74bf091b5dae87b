"""An S3-like bucket for the fleet simulation, and the client each simulated process has.

For benchmarks/fleet.py: many workers in one process against a store that
behaves, in time and in its refusals, like one S3 bucket, so that what grows
with the fleet shows up without a fleet. Two parts, as on AWS:

:class:`S3LikeBucket` is the bucket, one for the whole fleet:

- **Per-prefix limits**: S3 serves 3,500 PUT/COPY/POST/DELETE and 5,500
  GET/HEAD requests a second per partitioned prefix. Each partition here
  has a token bucket per class (writes: PUT, conditional PUT, DELETE;
  reads: GET, HEAD and LIST, which is a GET on the bucket), refilled at
  ``rates`` per second times ``scale``, holding at most a tenth of a
  second's worth. A request that finds its bucket empty is answered
  SlowDown, as S3 does.
- **Partitions**: a key's partition is its first segment (``queue``,
  ``memos``, ``outcomes``): a fresh bucket's. S3 splits a prefix that stays
  hot into more partitions over minutes; a fleet that must work from the
  first minute plans on the unsplit one.
- **One object's writes** (``object_writes``, off by default): at most that
  many writes a second to one key, the rest answered 429, as GCS allows
  about one a second per object (docs/storage.md, "Objects many processes
  write").
- **Seeded misbehaviours**, repeatable: ``conflicts`` of the conditional
  writes answered 409 ConditionalRequestConflict, each followed by
  ``conflict_burst - 1`` more on the same key (AWS gives them in bursts on
  a contended key), and ``slowdowns`` of all requests answered SlowDown
  whatever the rate. Whether the ``n``-th such write to a key, or the
  ``n``-th request to a partition, is refused is a hash of the seed, the
  key and ``n``, not a draw from a shared generator: the same requests meet
  the same refusals in every run, however the event loop interleaves the
  fleet's requests (the limits above depend on time, and so do not repeat
  exactly).

``counts`` has the requests the bucket served by (class, partition) and
``slowdowns`` the SlowDown and 429 answers, which S3 does not bill.

:class:`S3LikeStore` is one process's client of it, an ObjectStore:

- **Latency**: every request waits a round trip drawn uniformly from
  ``latency`` (20 to 60 ms by default) from its own ``random.Random(seed)``.
- **Retries and the send rate**, as ``S3Store``: a SlowDown or 429 is
  retried under stepstone.store.retry.RetryPolicy (full jitter from
  50 ms, five tries, then StoreUnavailable to the engine), and every try
  first waits on the adaptive send rate of its partition
  (stepstone.store.s3.throttle.AdaptiveRates). Each client has its
  own, as each process has one (``adaptive=False`` turns it off, as
  ``S3Store`` allows): the fleet's processes learn the bucket's limits each
  on its own, from its own answers.
- **Conflicts** are decided as ``S3Store`` decides them
  (stepstone.store.s3.conflicts): a re-read, then a lost race or another try.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import random
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal, TypeVar

from stepstone.store import DEFAULT_PAGE_SIZE, ObjectInfo, ObjectStore, StoredObject
from stepstone.store.errors import NotFound, Throttled
from stepstone.store.retry import RetryPolicy
from stepstone.store.s3.conflicts import (
    CONFLICT_RETRY,
    Undecided,
    WriteConflict,
    confirm_precondition,
    decide_delete,
    decide_put,
    through_conflicts,
)
from stepstone.store.s3.throttle import AdaptiveRates

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
    stamp: float

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


class SlowDown(Throttled):
    """S3's 503 SlowDown (or a 429): the partition, or the object, is over its rate."""


class _Tried:
    """What a write knows of its earlier tries (stepstone.store.s3.conflicts.Tried):
    a simulated refusal is never applied."""

    maybe_applied = False


def _share(seed: int, what: str, key: str, n: int) -> float:
    """A number in [0, 1) that depends only on its arguments."""
    digest = hashlib.blake2b(f"{seed}\0{what}\0{key}\0{n}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class S3LikeBucket:
    """The fleet's one bucket over ``inner`` (module docstring). ``scale``
    multiplies S3's per-prefix limits (0.1: a tenth of its rates); None
    turns them off. ``clock`` is for tests."""

    def __init__(
        self,
        inner: ObjectStore,
        *,
        scale: float | None = 1.0,
        partition: Callable[[str], str] = first_segment,
        object_writes: float | None = None,
        conflicts: float = 0.0,
        conflict_burst: int = 1,
        slowdowns: float = 0.0,
        seed: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.scale = scale
        self.partition = partition
        self.object_writes = object_writes
        self.conflicts = conflicts
        self.conflict_burst = conflict_burst
        self.slowdown_share = slowdowns
        self.seed = seed
        self.name = uuid.uuid4().hex[:8]
        """This bucket's, unlike any other's (its clients' location)."""
        self.clock = clock
        self.trace: list[tuple[float, str, str]] | None = None
        """If a list: (clock time, "read queue" or "write memos", the answer:
        "served", "SlowDown", "409" or the error's name) for every request
        (benchmarks/fleet_trace.py)."""
        self.counts: Counter[str] = Counter()
        self.slowdowns: Counter[str] = Counter()
        self.conflicted: Counter[str] = Counter()
        """409 answers, by partition."""
        self._buckets: dict[tuple[str, str], _Bucket] = {}
        self._object_buckets: dict[str, _Bucket] = {}
        self._nth: Counter[str] = Counter()
        self._burst_left: Counter[str] = Counter()

    def _limit(self, kind: str, part: str) -> _Bucket | None:
        if self.scale is None:
            return None
        bucket = self._buckets.get((kind, part))
        if bucket is None:
            rate = S3_RATES[kind] * self.scale
            burst = max(1.0, rate / 10)
            bucket = _Bucket(rate, burst, burst, self.clock())
            self._buckets[(kind, part)] = bucket
        return bucket

    def _over_object_rate(self, key: str) -> bool:
        if self.object_writes is None:
            return False
        bucket = self._object_buckets.get(key)
        if bucket is None:
            bucket = _Bucket(self.object_writes, 1.0, 1.0, self.clock())
            self._object_buckets[key] = bucket
        return not bucket.take(self.clock())

    def _conflicts(self, key: str) -> bool:
        """Whether this conditional write to ``key`` meets a (seeded) rival."""
        if self._burst_left[key] > 0:
            self._burst_left[key] -= 1
            return True
        self._nth[f"409 {key}"] += 1
        if _share(self.seed, "409", key, self._nth[f"409 {key}"]) < self.conflicts:
            self._burst_left[key] = self.conflict_burst - 1
            return True
        return False

    def _slowed(self, part: str) -> bool:
        if not self.slowdown_share:
            return False
        self._nth[f"503 {part}"] += 1
        return _share(self.seed, "503", part, self._nth[f"503 {part}"]) < self.slowdown_share

    async def serve(
        self, kind: str, key: str, call: Callable[[], Awaitable[T]], *, conditional: bool = False
    ) -> T:
        """Answer one request that has arrived: refused (SlowDown, 409), or ``call()``."""
        part = self.partition(key)
        if self.trace is None:
            return await self._serve(kind, key, part, call, conditional)
        answer = "served"
        try:
            return await self._serve(kind, key, part, call, conditional)
        except SlowDown:
            answer = "SlowDown"
            raise
        except WriteConflict:
            answer = "409"
            raise
        except Exception as error:
            answer = type(error).__name__
            raise
        finally:
            self.trace.append((self.clock(), f"{kind} {part}", answer))

    async def _serve(
        self, kind: str, key: str, part: str, call: Callable[[], Awaitable[T]], conditional: bool
    ) -> T:
        limit = self._limit(kind, part)
        if (
            self._slowed(part)
            or (limit is not None and not limit.take(self.clock()))
            or (kind == "write" and self._over_object_rate(key))
        ):
            self.slowdowns[f"{kind} {part}"] += 1
            raise SlowDown("SlowDown", location=self.inner.location, key=key)
        if conditional and self.conflicts and self._conflicts(key):
            self.conflicted[part] += 1
            raise WriteConflict("ConditionalRequestConflict", location=self.inner.location, key=key)
        self.counts[f"{kind} {part}"] += 1
        return await call()


class S3LikeStore(ObjectStore):
    """One process's client of ``bucket`` (module docstring)."""

    def __init__(
        self,
        bucket: S3LikeBucket,
        *,
        latency: tuple[float, float] = (0.020, 0.060),
        seed: int = 0,
        retry: RetryPolicy | None = None,
        conflicts: RetryPolicy | None = None,
        adaptive: bool | AdaptiveRates = True,
    ) -> None:
        self.bucket = bucket
        self.inner = bucket.inner
        # Not the MemoryStore's own location: a queue takes a memory:// store
        # for one process's alone (StoreQueue.holder_scope), so every worker
        # here would take the host's id, and each sweep away the others'
        # worker records as its own earlier lives. Named for this bucket too:
        # an id's lock left on the host by a run that was killed would
        # otherwise tell the next run's worker of that id that it is the
        # killed life started again, and it would read every record changed
        # lately to take its runs back (StoreQueue's reclaim).
        self.location = f"s3like-{bucket.name}+{self.inner.location}"
        self.key_limit = self.inner.key_limit
        self.remote = True  # (as S3 is: requests are what it counts)
        self.latency = latency
        self.rng = random.Random(seed)
        self.retry = retry or RetryPolicy(rng=random.Random(seed + 1))
        self.conflict_retry = conflicts or dataclasses.replace(
            CONFLICT_RETRY, rng=random.Random(seed + 2)
        )
        if isinstance(adaptive, AdaptiveRates):
            self.send_rates: AdaptiveRates | None = adaptive
        else:
            self.send_rates = AdaptiveRates() if adaptive else None

    async def _request(
        self,
        kind: str,
        key: str,
        call: Callable[[], Awaitable[T]],
        *,
        conditional: bool = False,
        expected: str | None = None,
    ) -> T:
        rates = self.send_rates
        where = f"{self.location}/{key}"
        creates = conditional and expected is None
        rate = (
            None
            if rates is None
            else rates.sending(key, reads=kind == "read", creates=creates, location=where)
        )
        confirm = partial(confirm_precondition, self, key, expected) if conditional else None

        async def once() -> T:
            sent = 0.0 if rate is None else await rate.acquire(confirm=confirm)
            await asyncio.sleep(self.rng.uniform(*self.latency))
            try:
                result = await self.bucket.serve(kind, key, call, conditional=conditional)
            except SlowDown:
                if rate is not None:
                    rate.record(sent=sent, refused=True)
                raise
            if rate is not None:
                rate.record(sent=sent, refused=False)
            return result

        return await self.retry.run(once, retryable=lambda e: isinstance(e, SlowDown))

    async def _conditional(
        self,
        key: str,
        call: Callable[[], Awaitable[T]],
        decide: Callable[[], Awaitable[T | Literal[Undecided.UNDECIDED]]],
        expected: str | None = None,
    ) -> T:
        return await through_conflicts(
            lambda: self._request("write", key, call, conditional=True, expected=expected),
            decide,
            self.conflict_retry,
            location=self.location,
            key=key,
        )

    async def ours(self, key: str, data: bytes) -> str | None:
        """The etag if ``key`` holds exactly ``data`` (stepstone.store.s3.conflicts.Rereads)."""
        try:
            got = await self.get(key)
        except NotFound:
            return None
        return got.etag if got.data == data else None

    async def get(self, key: str) -> StoredObject:
        return await self._request("read", key, lambda: self.inner.get(key))

    async def head(self, key: str) -> ObjectInfo:
        return await self._request("read", key, lambda: self.inner.head(key))

    async def put(self, key: str, data: bytes) -> str:
        return await self._request("write", key, lambda: self.inner.put(key, data))

    async def put_if_absent(self, key: str, data: bytes) -> str:
        return await self._conditional(
            key,
            lambda: self.inner.put_if_absent(key, data),
            lambda: decide_put(self, key, data, "absent", None, _Tried()),
        )

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return await self._conditional(
            key,
            lambda: self.inner.put_if_match(key, data, etag),
            lambda: decide_put(self, key, data, "match", etag, _Tried()),
            etag,
        )

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        if if_match is None:
            await self._request("write", key, lambda: self.inner.delete(key))
            return
        await self._conditional(
            key,
            lambda: self.inner.delete(key, if_match=if_match),
            lambda: decide_delete(self, key, if_match, _Tried()),
            if_match,
        )

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
        """A client closes alone; the bucket stays (the fleet's other clients use it)."""
