"""A conditional write that met another one: a lost race to decide, not an outage.

S3 may answer a conditional write with **409 ConditionalRequestConflict**
when another conditional write to the same key is in flight. Nothing was
written, and the answer says nothing of who wins. Retried like a 503 under
the store's few quick tries, a burst of them on one contended key (AWS gives
several in a row within a couple of seconds) outlasted the tries and came
back as StoreUnavailable: a step's memo that never landed (the step ran
again), an outcome "not recorded", a submit that raised to its caller. A
conflict is not an outage, so it has its own rule and its own budget:

- **Re-read and decide.** After a 409 the store reads the object's etag
  (one HEAD). If the rival write landed where ours was conditional on it (a
  create finds the object there, a compare-and-swap or a fenced delete finds
  another etag), our write lost the race: AlreadyExists or
  PreconditionFailed, exactly as a 412 would say, for the caller to re-read
  and decide as it does after any lost race. If the key is as we left it
  (the rival has not landed, or failed), the race is undecided and the write
  is tried again.
- **Its own budget.** The tries after conflicts wait under
  :data:`CONFLICT_RETRY`, long enough to outlast a burst on one key, and
  throttling and outages do not spend it (nor do conflicts spend theirs);
  only a key that conflicts past it gives StoreUnavailable.
- **Never success.** A 409 is never taken as our write landing; the one way
  a conflict ends in success is the re-read finding our write's token after
  an earlier try of ours that may have been applied (the rule of
  docs/storage.md, "A retried write whose first try landed").
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from typing import Literal, Protocol, TypeVar

from ..base import ObjectInfo
from ..errors import AlreadyExists, NotFound, PreconditionFailed, StoreError, StoreUnavailable
from ..retry import RetryPolicy

T = TypeVar("T")

CONFLICT_CODES = frozenset({"ConditionalRequestConflict"})
"""The answers (with HTTP 409) that say a concurrent conditional write is in flight."""

CONFLICT_RETRY = RetryPolicy(attempts=12, base=0.1, cap=2.0)
"""How long a write waits out conflicts on its key: its tries and their waits."""


class WriteConflict(StoreError):
    """A conditional write met a concurrent one on its key (S3's 409); the
    S3Store decides it (:func:`through_conflicts`) and never raises it."""


class Undecided(enum.Enum):
    """The re-read after a conflict left the race open: try the write again."""

    UNDECIDED = "undecided"


UNDECIDED = Undecided.UNDECIDED


async def through_conflicts(
    write: Callable[[], Awaitable[T]],
    decide: Callable[[], Awaitable[T | Literal[Undecided.UNDECIDED]]] | None,
    policy: RetryPolicy,
    *,
    location: str,
    key: str | None,
) -> T:
    """``write()``, tried again after each conflict that ``decide()`` (the
    re-read) leaves undecided, under ``policy``. ``decide`` returns the
    write's result when the re-read shows it landed, raises the lost race
    (AlreadyExists, PreconditionFailed, NotFound), or returns UNDECIDED;
    without it (an unconditional write) every conflict is undecided."""
    delays = policy.delays()
    conflicts = 0
    while True:
        try:
            return await write()
        except WriteConflict as exc:
            conflicts += 1
            if decide is not None:
                answer = await decide()
                if answer is not UNDECIDED:
                    return answer
            delay = next(delays, None)
            if delay is None:
                raise StoreUnavailable(
                    f"{exc.message}; the key still conflicted after {conflicts} tries",
                    location=location,
                    key=key,
                ) from exc
            await asyncio.sleep(delay)


class Tried(Protocol):
    """What a write knows of its earlier tries."""

    maybe_applied: bool
    """Whether one of them may have been applied by the store."""


class Rereads(Protocol):
    """What deciding a conflict reads: the object's etag, and whether it holds our bytes."""

    location: str

    async def head(self, key: str) -> ObjectInfo: ...

    async def ours(self, key: str, mine: str) -> str | None: ...


async def decide_put(
    store: Rereads, key: str, mine: str, conditional: str, expected: str | None, tried: Tried
) -> str | Literal[Undecided.UNDECIDED]:
    """After a conflict on a create (``conditional`` "absent") or a
    compare-and-swap against ``expected`` ("match"): lost, undecided, or
    ours (the object holds the write token ``mine``)."""
    try:
        etag = (await store.head(key)).etag
    except NotFound:
        if conditional == "absent":
            return UNDECIDED  # the rival create has not landed: try again
        raise
    if conditional == "match" and etag == expected:
        return UNDECIDED  # the rival swap has not landed: try again
    ours = await store.ours(key, mine) if tried.maybe_applied else None
    if ours is not None:
        return ours
    if conditional == "absent":
        raise AlreadyExists("object already exists", location=store.location, key=key)
    raise PreconditionFailed("etag mismatch after a conflict", location=store.location, key=key)


async def decide_delete(
    store: Rereads, key: str, expected: str | None, tried: Tried
) -> Literal[Undecided.UNDECIDED] | None:
    """After a conflict on a delete fenced on ``expected``: lost, undecided, or done."""
    try:
        etag = (await store.head(key)).etag
    except NotFound:
        if tried.maybe_applied:
            return None  # an earlier try of ours removed it
        raise
    if etag == expected:
        return UNDECIDED
    raise PreconditionFailed("etag mismatch after a conflict", location=store.location, key=key)


async def confirm_precondition(store: Rereads, key: str, expected: str | None) -> None:
    """Before a conditional write that waited for a hot object's turn
    (stepstone.store.s3.object_turns): raise what the write would be
    answered if another process wrote the object meanwhile, read with one
    HEAD. A provider that limits the writes to one object counts a write
    refused as stale as one of them (the fleet simulation does), and a
    process that waited its turn has often a stale etag: a read is not
    counted, so the turn is not spent on a write bound to lose. ``expected``
    is the etag of a compare-and-swap or a fenced delete, None for a create.
    A key found absent under a swap is left to the write's own answer."""
    try:
        etag = (await store.head(key)).etag
    except NotFound:
        return
    if expected is None:
        raise AlreadyExists("object already exists", location=store.location, key=key)
    if etag != expected:
        raise PreconditionFailed("etag mismatch", location=store.location, key=key)
