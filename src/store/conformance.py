"""The conformance check: does this store hold what the engine rests on?

Every promise stepstone makes (a job runs once per idempotency key, a step's
result is recorded once, a stale worker cannot settle a job another holds)
rests on a handful of store properties: atomic create-if-absent, atomic
compare-and-swap on the etag, a refused ``If-Match`` on a missing key,
fenced deletes, listings and reads that see the last write, and objects as
large as a step's result. S3-compatible services differ on exactly these
(a provider without conditional writes, a MinIO release that accepted
``If-Match`` on a missing key), and moto, which the test suite runs on,
answers them the way AWS documents. So a user qualifies their own bucket
before trusting it: :func:`check_store` (``stepstone check-store URL``) tries
each property against the store, in a scratch prefix it removes afterwards,
and says for each one that fails what it breaks and what to do.

Each property is tried the way it fails in practice: under concurrency where
a store could apply a check and a write in two steps (32 creators racing for
one key, 8 writers incrementing one counter), and right after a write where
a store could serve a stale answer. A property that does not answer within
its time limit fails; nothing retries for ever. The latency of each
operation, one call at a time, is measured last and reported, not judged;
so is whether the store limits the writes to one object (GCS takes about
one a second), which the engine does not need but must be told of
(``object_turns``: docs/storage.md, "Hot objects").
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from .base import ObjectInfo, ObjectStore, ProviderNotes
from .errors import (
    AlreadyExists,
    NotFound,
    PreconditionFailed,
    StoreConfigError,
    StoreError,
    Throttled,
)
from .s3.throttle import object_key

SCRATCH = "stepstone-check-store"
"""The first key segment of every scratch prefix; nothing of the engine's lives there."""

PROPERTIES: dict[str, str] = {
    "create-if-absent": (
        "stepstone needs PutObject with If-None-Match: * applied atomically, one winner "
        "per key: without it two submits of one idempotency key can both run and two "
        "writers can both record a step. AWS S3 has it since August 2024; on another "
        "provider use a release that documents conditional writes on PutObject"
    ),
    "compare-and-swap": (
        "stepstone needs PutObject with If-Match refused when the etag is stale: leases, "
        "slots and schedule markers are swapped on the etag a worker read. AWS S3 has it "
        "since November 2024; on another provider use a release that documents If-Match "
        "on PutObject (on Tigris, add &header=X-Tigris-Consistent:true to the store URL)"
    ),
    "concurrent-increments": (
        "a store that checks If-Match and then writes in two steps lets two writers "
        "both win against one etag, so concurrent updates are lost: do not run "
        "stepstone on it (a proxy or gateway in front of the bucket can cause this too)"
    ),
    "if-match-on-missing": (
        "this store accepts If-Match on a missing key: stepstone cannot fence on it "
        "(a worker whose record was removed would write it back); MinIO had this bug "
        "and fixed it in later releases: upgrade the server"
    ),
    "conditional-delete": (
        "stepstone removes queue records, markers and outcomes only at the etag it "
        "read (DeleteObject with If-Match): a store that ignores or refuses the "
        "condition lets a stale worker remove a record another has rewritten; use a "
        "provider or release that documents If-Match on DeleteObject"
    ),
    "list-after-write": (
        "stepstone finds jobs, runs and outcomes by listing: a listing that misses "
        "recent writes or shows deleted objects delays or repeats work; use a store "
        "with strongly consistent listings (AWS S3 has them since December 2020)"
    ),
    "read-after-overwrite": (
        "stepstone reads a record back to decide after losing a compare-and-swap: a "
        "read that returns an older version makes it decide on stale state; use a "
        "store with read-after-write consistency (or, behind a cache or CDN, bypass it)"
    ),
    "large-objects": (
        "step results and outcomes are single objects, created only where none is: keep "
        "results under the size this store takes in one PutObject (or raise the limit of "
        "the proxy or gateway in front of it), or store large payloads elsewhere and "
        "record a reference; a store whose multipart completion ignores its conditions "
        "must not be told multipart_conditional=true"
    ),
}
"""Each property the check tries, in order, and what to do when it fails."""

LATENCY_OPERATIONS = ("get", "head", "put", "put_if_absent", "put_if_match", "list", "delete")
REWRITES = 5
"""Writes to one object, back to back, that show whether the store limits them."""
OBJECT_LIMIT_REMEDY = (
    "add object_turns=true to the store URL (or S3Store(object_turns=True)) so that "
    "every object's writes keep the pace it takes, and run the check again with it "
    "(docs/storage.md, Hot objects)"
)


@dataclass(frozen=True)
class Verdict:
    """What the check saw of one property."""

    name: str
    passed: bool
    detail: str
    """What was seen, in a sentence."""

    @property
    def remedy(self) -> str:
        """What to do about a failure: what it breaks and how to get the property."""
        return "" if self.passed else PROPERTIES[self.name]


@dataclass(frozen=True)
class Latency:
    """The latency of one operation over ``samples`` calls made one at a time."""

    operation: str
    samples: int
    p50: float
    p99: float
    """Seconds; with fewer than a hundred samples, close to the slowest one."""


@dataclass(frozen=True)
class CheckSettings:
    """How hard the check tries; the defaults are what docs/operations.md describes."""

    creators: int = 32
    writers: int = 8
    increments: int = 80
    large_bytes: int = 16 * 1024 * 1024
    samples: int = 20
    time_limit: float = 120.0
    """Seconds one property may take before it fails as unanswered."""


@dataclass
class CheckReport:
    """The verdict on each property, the latencies, and what was left behind."""

    location: str
    scratch: str
    verdicts: list[Verdict] = field(default_factory=list)
    latencies: list[Latency] = field(default_factory=list)
    unmeasured: str = ""
    """Why the latencies could not be measured ("" when they were)."""
    one_object: str = ""
    """What back-to-back writes to one object met, in a sentence ("" unmeasured)."""
    object_limited: bool = False
    """The store limits the writes to one object (then see :data:`OBJECT_LIMIT_REMEDY`)."""
    leftover: str = ""
    """Why the scratch prefix could not be removed ("" when it was)."""
    provider: list[str] = field(default_factory=list)
    """How the provider does what the engine needs, where the store found a
    way of its own (:class:`stepstone.store.base.ProviderNotes`), one sentence each."""

    @property
    def passed(self) -> bool:
        return bool(self.verdicts) and all(v.passed for v in self.verdicts)


class _Failed(Exception):
    """A property does not hold; the message says what was seen."""


async def check_store(
    store: ObjectStore,
    settings: CheckSettings | None = None,
    *,
    only: Sequence[str] | None = None,
) -> CheckReport:
    """Try every property of :data:`PROPERTIES` (or those ``only`` names) on
    ``store`` in a fresh scratch prefix, measure each operation's latency, and
    remove the scratch prefix.

    Raises StoreConfigError when the store cannot be used at all (no bucket,
    refused credentials); every other failure is a property's verdict.
    """
    unknown = set(only or ()) - set(PROPERTIES)
    if unknown:
        raise ValueError(f"unknown properties {sorted(unknown)}; known: {', '.join(PROPERTIES)}")
    settings = settings or CheckSettings()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    scratch = f"{SCRATCH}/{stamp}-{secrets.token_hex(4)}/"
    report = CheckReport(store.location, scratch)
    await store.put(scratch + "started", b"stepstone check-store")  # config errors show here
    checks: dict[str, Callable[[ObjectStore, str, CheckSettings], Awaitable[str]]] = {
        "create-if-absent": _create_if_absent,
        "compare-and-swap": _compare_and_swap,
        "concurrent-increments": _concurrent_increments,
        "if-match-on-missing": _if_match_on_missing,
        "conditional-delete": _conditional_delete,
        "list-after-write": _list_after_write,
        "read-after-overwrite": _read_after_overwrite,
        "large-objects": _large_objects,
    }
    try:
        # First, while the store's send rates know nothing of this bucket: the
        # refusals of the properties' writes would slow the scratch's partition.
        report.object_limited, report.one_object = await _one_object(
            store, f"{scratch}one-object/", settings
        )
        for name in [p for p in PROPERTIES if only is None or p in only]:
            report.verdicts.append(
                await _verdict(name, checks[name](store, f"{scratch}{name}/", settings), settings)
            )
        if isinstance(store, ProviderNotes):
            try:
                report.provider = await asyncio.wait_for(
                    store.provider_notes(), settings.time_limit
                )
            except (StoreError, TimeoutError) as exc:
                report.provider = [f"not found out: {exc or 'no answer in time'}"]
        try:
            report.latencies = await asyncio.wait_for(
                _latencies(store, f"{scratch}latency/", settings), settings.time_limit
            )
        except TimeoutError:
            report.unmeasured = f"no answer within {settings.time_limit:g} s"
        except StoreConfigError:
            raise
        except StoreError as exc:
            report.unmeasured = f"the store answered an error: {exc}"
    finally:
        report.leftover = await _remove(store, scratch)
    return report


async def refuse_unconditional(store: ObjectStore) -> None:
    """Fail at once on a store that ignores conditional writes: one
    compare-and-swap on a key that does not exist (one PUT, which writes
    nothing on a store that holds the conditions), for a worker's start.

    Raises StoreConfigError when the write landed (the condition was ignored,
    or applied to a missing key as an old MinIO did), after removing what it
    wrote, and when the store refuses conditional writes as not implemented.
    """
    key = f"{SCRATCH}/startup-probe"
    try:
        await store.put_if_match(key, b"stepstone startup probe", '"stepstone-startup-probe"')
    except (NotFound, PreconditionFailed):
        return
    await store.delete(key)
    raise StoreConfigError(
        "this store took a write with If-Match on a key that does not exist: it ignores "
        "or misapplies conditional writes, which stepstone's promises rest on; "
        f"`stepstone check-store {store.location}` says what is missing",
        location=store.location,
    )


async def _verdict(name: str, check: Awaitable[str], settings: CheckSettings) -> Verdict:
    try:
        detail = await asyncio.wait_for(check, settings.time_limit)
    except _Failed as exc:
        return Verdict(name, False, str(exc))
    except TimeoutError:
        return Verdict(name, False, f"no answer within {settings.time_limit:g} s")
    except StoreConfigError:
        raise
    except Throttled as exc:
        return Verdict(
            name,
            False,
            f"the store refused writes as too many ({exc}); if it limits the writes to one "
            "object (see below), check it with object_turns=true in the store URL",
        )
    except StoreError as exc:
        return Verdict(name, False, f"the store answered an error: {exc}")
    return Verdict(name, True, detail)


async def _remove(store: ObjectStore, scratch: str) -> str:
    try:
        async with asyncio.timeout(120):
            for _ in range(3):  # a listing that lags can leave objects a first pass missed
                found = [info.key async for info in store.scan(scratch)]
                if not found:
                    return ""
                await asyncio.gather(*(store.delete(key) for key in found))
            left = [info.key async for info in store.scan(scratch)]
    except (StoreError, TimeoutError) as exc:
        return f"could not remove {scratch}: {exc or 'no answer within 120 s'}"
    return f"{len(left)} objects left under {scratch}" if left else ""


# -- the properties -------------------------------------------------------------------


async def _create_if_absent(store: ObjectStore, base: str, settings: CheckSettings) -> str:
    key = base + "key"
    n = settings.creators

    async def create(i: int) -> str | None:
        try:
            await store.put_if_absent(key, f"creator {i}".encode())
        except AlreadyExists:
            return None
        return f"creator {i}"

    winners = [w for w in await asyncio.gather(*(create(i) for i in range(n))) if w]
    if len(winners) != 1:
        raise _Failed(f"{len(winners)} of {n} concurrent creators of one key were told they won")
    held = (await store.get(key)).data.decode(errors="replace")
    if held != winners[0]:
        raise _Failed(f"the winner was {winners[0]!r} but the object holds {held!r}")
    try:
        await store.put_if_absent(key, b"late")
    except AlreadyExists:
        pass
    else:
        raise _Failed("a create over an existing object succeeded")
    return f"one winner among {n} concurrent creators; a late create refused"


async def _compare_and_swap(store: ObjectStore, base: str, settings: CheckSettings) -> str:
    key = base + "key"
    first = await store.put(key, b"version 1")
    second = await store.put_if_match(key, b"version 2", first)
    try:
        await store.put_if_match(key, b"version 3 (stale)", first)
    except PreconditionFailed:
        pass
    else:
        raise _Failed("a write under a stale etag succeeded")
    await store.put_if_match(key, b"version 3", second)
    return "the current etag taken, a stale one refused"


async def _concurrent_increments(store: ObjectStore, base: str, settings: CheckSettings) -> str:
    key = base + "counter"
    await store.put(key, b"0 start")
    per_writer, extra = divmod(settings.increments, settings.writers)
    refused = 0
    budget = 50 * settings.increments  # a store that refuses everything fails, not hangs

    async def writer(w: int) -> int:
        nonlocal refused, budget
        done = 0
        for _ in range(per_writer + (w < extra)):
            while True:
                budget -= 1
                if budget < 0:
                    raise _Failed(f"{refused} compare-and-swaps refused; the counter is stuck")
                current = await store.get(key)
                count = int(current.data.split()[0])
                body = f"{count + 1} writer {w} {done}".encode()  # unique: no ABA
                try:
                    await store.put_if_match(key, body, current.etag)
                except PreconditionFailed:
                    refused += 1
                    continue
                done += 1
                break
        return done

    done = sum(await asyncio.gather(*(writer(w) for w in range(settings.writers))))
    final = int((await store.get(key)).data.split()[0])
    if final != done:
        raise _Failed(
            f"{done} increments by {settings.writers} concurrent writers succeeded but the "
            f"counter reads {final}: {done - final} lost"
        )
    return (
        f"{done} increments by {settings.writers} concurrent writers, none lost "
        f"({refused} refused and retried)"
    )


async def _if_match_on_missing(store: ObjectStore, base: str, settings: CheckSettings) -> str:
    etag = await store.put(base + "present", b"an etag to present")
    key = base + "missing"
    try:
        await store.put_if_match(key, b"must not land", etag)
    except NotFound:
        answer = "not found"
    except PreconditionFailed:
        answer = "a failed precondition"
    else:
        raise _Failed("a write with If-Match on a missing key succeeded")
    try:
        await store.head(key)
    except NotFound:
        return f"refused ({answer}); the key is still missing"
    raise _Failed(f"refused ({answer}) but the key now exists")


async def _conditional_delete(store: ObjectStore, base: str, settings: CheckSettings) -> str:
    key = base + "key"
    first = await store.put(key, b"version 1")
    second = await store.put(key, b"version 2")
    try:
        await store.delete(key, if_match=first)
    except PreconditionFailed:
        pass
    else:
        raise _Failed("a delete under a stale etag succeeded")
    try:
        held = await store.head(key)
    except NotFound:
        raise _Failed("a delete under a stale etag was refused but removed the object") from None
    if held.etag != second:
        raise _Failed(f"the object's etag is {held.etag}, not the {second} last written")
    await store.delete(key, if_match=second)
    try:
        await store.head(key)
    except NotFound:
        pass
    else:
        raise _Failed("a delete under the current etag left the object")
    try:
        await store.delete(base + "missing", if_match=second)
    except NotFound:
        pass
    except PreconditionFailed:
        pass
    else:
        raise _Failed("a delete with If-Match on a missing key reported success")
    return "a stale etag refused, the current one removed the object, a missing key refused"


async def _list_after_write(store: ObjectStore, base: str, settings: CheckSettings) -> str:
    written: dict[str, str] = {}
    for i in range(5):
        written[f"{base}k{i}"] = await store.put(f"{base}k{i}", f"object {i}".encode() * (i + 1))
    seen = await store.list(base)
    _same_listing(seen, written, "after five writes")
    first = await store.list(base, limit=2)
    rest = await store.list(base, start_after=first[-1].key if first else None)
    if [i.key for i in first + rest] != sorted(written):
        raise _Failed("a listing in two pages (limit, then start_after) does not add up")
    gone = f"{base}k1"
    await store.delete(gone)
    del written[gone]
    written[f"{base}k3"] = await store.put(f"{base}k3", b"overwritten")
    _same_listing(await store.list(base), written, "after a delete and an overwrite")
    return "every write listed at once, in key order, with its etag; a delete unlisted"


def _same_listing(seen: list[ObjectInfo], written: dict[str, str], when: str) -> None:
    got = {info.key: info.etag for info in seen}
    if list(got) != sorted(written):
        missing = sorted(set(written) - set(got))
        extra = sorted(set(got) - set(written))
        raise _Failed(
            f"the listing {when} is wrong: {len(missing)} written objects missing, "
            f"{len(extra)} deleted ones shown, or out of order"
        )
    stale = [k for k in written if got[k] != written[k]]
    if stale:
        raise _Failed(f"the listing {when} shows an older etag for {len(stale)} objects")


async def _read_after_overwrite(store: ObjectStore, base: str, settings: CheckSettings) -> str:
    key = base + "key"
    etag = await store.put(key, b"round 0")
    rounds = 10
    for i in range(1, rounds + 1):
        body = f"round {i}".encode()
        if i % 2:
            etag = await store.put(key, body)
        else:
            etag = await store.put_if_match(key, body, etag)
        got = await store.get(key)
        if got.data != body or got.etag != etag:
            raise _Failed(f"a read right after overwrite {i} returned an older version")
        if (await store.head(key)).etag != etag:
            raise _Failed(f"a head right after overwrite {i} returned an older etag")
    return f"{rounds} overwrites, each read back at once (get and head)"


async def _large_objects(store: ObjectStore, base: str, settings: CheckSettings) -> str:
    try:
        return await _large_object(store, base + "key", settings.large_bytes)
    except StoreConfigError as exc:  # a store told to trust a condition its provider ignores
        raise _Failed(exc.message) from exc


async def _large_object(store: ObjectStore, key: str, size: int) -> str:
    data = os.urandom(size)
    digest = hashlib.sha256(data).digest()
    await store.put_if_absent(key, data)
    del data
    got = await store.get(key)
    if len(got.data) != size or hashlib.sha256(got.data).digest() != digest:
        raise _Failed(f"an object of {_mib(size)} came back as {len(got.data)} other bytes")
    if (await store.head(key)).size != size:
        raise _Failed(f"an object of {_mib(size)} is listed at another size")
    try:
        await store.put_if_absent(key, os.urandom(size))
    except AlreadyExists:
        pass
    else:
        raise _Failed(f"a second create-if-absent of {_mib(size)} over the first one succeeded")
    got = await store.get(key)
    if hashlib.sha256(got.data).digest() != digest:
        raise _Failed(f"a refused create-if-absent of {_mib(size)} replaced the first one")
    return (
        f"an object of {_mib(size)} written (create-if-absent) and read back intact; "
        "a second create over it refused"
    )


def _mib(size: int) -> str:
    return f"{size / 1024 / 1024:g} MiB" if size >= 1024 * 1024 else f"{size} bytes"


# -- one object's writes, and latency -------------------------------------------------


async def _one_object(store: ObjectStore, base: str, settings: CheckSettings) -> tuple[bool, str]:
    """Whether ``REWRITES`` writes to one key back to back meet a limit on
    the object (refused as too many, or found a hot object by the store's
    send rates), and what was seen."""
    key = base + "key"
    hot = getattr(getattr(store, "send_rates", None), "hot", None)
    told = hot is not None and hot.every_object
    refused = 0
    start = time.perf_counter()
    try:
        async with asyncio.timeout(settings.time_limit):
            for i in range(REWRITES):
                try:
                    await store.put(key, f"rewrite {i}".encode())
                except Throttled:
                    refused += 1
    except TimeoutError:
        return False, f"not measured: no answer within {settings.time_limit:g} s"
    except StoreConfigError:
        raise
    except StoreError as exc:
        return False, f"not measured: the store answered an error: {exc}"
    seen = f"{REWRITES} writes to one object back to back took {time.perf_counter() - start:.2f} s"
    if refused:
        seen += f", {refused} refused as too many after the store's tries"
    prefix = getattr(store, "prefix", "")
    named = object_key(key, under=prefix if isinstance(prefix, str) else "")
    found = hot is not None and (hot.every_object or named in hot.rates)
    if refused or (found and not told):
        return True, f"{seen}: the store limits the writes to one object"
    if told:
        return False, f"{seen}, paced as object_turns asks"
    return False, f"{seen}: no limit on one object's writes seen"


async def _latencies(store: ObjectStore, base: str, settings: CheckSettings) -> list[Latency]:
    times: dict[str, list[float]] = {op: [] for op in LATENCY_OPERATIONS}

    async def timed(op: str, call: Awaitable[object]) -> None:
        start = time.perf_counter()
        await call
        times[op].append(time.perf_counter() - start)

    key = base + "key"
    etag = await store.put(key, b"latency 0")
    for i in range(settings.samples):
        await timed("put", store.put(key, f"latency {i} put".encode()))
        etag = (await store.head(key)).etag
        await timed("put_if_match", store.put_if_match(key, f"latency {i} cas".encode(), etag))
        await timed("get", store.get(key))
        await timed("head", store.head(key))
        await timed("list", store.list(base))
        fresh = f"{base}fresh-{i}"
        await timed("put_if_absent", store.put_if_absent(fresh, b"fresh"))
        made = (await store.head(fresh)).etag
        await timed("delete", store.delete(fresh, if_match=made))
    return [_latency(op, times[op]) for op in LATENCY_OPERATIONS if times[op]]


def _latency(operation: str, samples: list[float]) -> Latency:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return Latency(operation, len(ordered), at(0.5), at(0.99))
