"""One small object that every worker process updates by compare-and-swap.

A concurrency key's slot table and a rate limit's state are each one object
in the store, read and written by every process that runs the job type.
:class:`SharedObject` is one process's handle on one of them:

- **Compare-and-swap.** An update applies a pure change (old state and the
  time in, new state and an answer out) to the object as read, and writes
  the result on the etag it read: create-if-absent when there was none, a
  conditional delete when the change leaves nothing. A refused write means
  another process wrote first: read again, apply again.
- **One write for many.** Updates asked for while a write is in flight wait
  and go out together in the next one, applied in the order they were
  asked: 64 runs of one key starting in one process make one request, not 64.
- **No read when it wrote last.** The version this process last wrote is
  kept, and the next update swaps against its etag without reading first; if
  another process wrote since, the swap is refused and it reads then. An
  object this process has not seen is taken to be absent (a key's slots
  exist only while its runs do), so a first update creates it without a
  read, or is refused and reads. An update that changes nothing confirms
  the kept version with a HEAD before it answers, so no answer rests on a
  stale copy.
- **Patient with a hot object.** A write the store kept refusing as too
  many (Throttled) is read and tried again, for up to ``PATIENCE``
  seconds: an object a crowd writes, on a store that takes one write a
  second to it (GCS), refuses some of their writes as a matter of course,
  and the store spaces their turns out
  (stepstone.store.s3.object_turns). Failing the update there would
  fail the attempt of a run that only had to wait.
- **Distinct bytes.** Every write carries a revision, and every creation a
  random nonce, so no two versions have the same bytes: on S3 an etag is the
  MD5 of the body, and equal bytes would let a stale swap through. That also
  lets a write whose answer was lost be recognised when read back.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from stepstone.records.codec import pack, unpack
from stepstone.runtime import plausible
from stepstone.runtime.clock import Clock
from stepstone.runtime.store_queue.lost_answers import landed
from stepstone.runtime.store_queue.records import CorruptRecord
from stepstone.store import (
    NotFound,
    ObjectStore,
    PreconditionFailed,
    StoreUnavailable,
    Throttled,
)

log = logging.getLogger("stepstone")

S = TypeVar("S")
T = TypeVar("T")

FORMAT = 1
MAX_CONFLICTS = 64
"""Refused writes in a row before an update gives up (raises Contended)."""
CONFLICT_PAUSE = 0.002
"""After the second refused write in a row, pause up to this, doubling per
refusal (capped at 0.1 s), so processes racing for one object spread out."""
PATIENCE = 120.0
"""Seconds an update keeps trying a write the store refuses as too many."""

KEPT_OBJECTS = 4096
"""Shared objects (keys) a runner keeps its last version of; the least
recently used beyond that are forgotten (costing one read when next used)."""

StateChange = Callable[[S | None, float], tuple[S | None, T]]
"""A pure update: (state or None when absent, now) -> (new state or None, answer)."""


class Contended(StoreUnavailable):
    """An update was refused ``MAX_CONFLICTS`` times in a row."""


@dataclass(frozen=True, slots=True)
class _Version(Generic[S]):
    etag: str | None
    """None: the object is absent."""
    state: S | None
    rev: int = 0
    nonce: str = ""


class SharedObject(Generic[S]):
    """This process's handle on the object ``key`` (see the module docstring).

    ``to_fields`` and ``from_fields`` turn a state into MessagePack-able
    fields and back (``from_fields`` raises CorruptRecord naming the key).
    An object that does not decode raises CorruptRecord from every update,
    unless the state may safely start afresh (``repairable``: a rate
    limit's, not a slot table, whose holders would be forgotten): then it is
    taken as absent, with a warning naming it, and the update replaces it.
    """

    def __init__(
        self,
        store: ObjectStore,
        key: str,
        clock: Clock,
        *,
        to_fields: Callable[[S], Any],
        from_fields: Callable[[Any, str], S],
        repairable: bool = False,
    ) -> None:
        self.key = key
        self._store = store
        self._clock = clock
        self._to_fields = to_fields
        self._from_fields = from_fields
        self._repairable = repairable
        self._kept: _Version[S] | None = _Version(None, None)
        self._pending: list[tuple[StateChange[S, Any], asyncio.Future[Any]]] = []
        self._writer: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        """Whether updates are waiting or being written."""
        return bool(self._pending) or (self._writer is not None and not self._writer.done())

    async def update(self, change: StateChange[S, T]) -> T:
        """Apply ``change`` to the object as it stands, durably; its answer.

        The update goes out even if the caller is cancelled meanwhile."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((change, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_pending(), name=f"update {self.key}")
        return cast(T, await asyncio.shield(future))

    async def _write_pending(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                answers = await self._commit([change for change, _ in batch])
            except Exception as error:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                continue
            for (_, future), answer in zip(batch, answers, strict=True):
                if not future.done():
                    future.set_result(answer)

    async def _commit(self, changes: list[StateChange[S, Any]]) -> list[Any]:
        version, fresh = self._kept, False
        conflicts, patient_until = 0, self._clock.now() + PATIENCE
        while conflicts < MAX_CONFLICTS:
            if version is None:
                version, fresh = await self._read(), True
            now = self._clock.now()
            state, answers = version.state, []
            for change in changes:
                state, answer = change(state, now)
                answers.append(answer)
            try:
                if state == version.state:
                    if not fresh and not await self._still(version):
                        version = self._kept = None
                        continue
                else:
                    version = await self._write(version, state)
            except PreconditionFailed:  # another process wrote first (or deleted it)
                version = self._kept = None
                if conflicts:
                    await asyncio.sleep(random.uniform(0, min(0.1, CONFLICT_PAUSE * 2**conflicts)))
                conflicts += 1
                continue
            except NotFound:
                version = self._kept = None
                conflicts += 1
                continue
            except Throttled:  # (not written: ``landed`` read it back)
                version = self._kept = None
                if self._clock.now() < patient_until:
                    continue
                raise
            except BaseException:
                self._kept = None  # the write may or may not have landed
                raise
            self._kept = version
            return answers
        raise Contended(f"{MAX_CONFLICTS} writes in a row refused", key=self.key)

    async def read(self) -> S | None:
        """The state as stored now (one GET; None: absent), for people to see.
        Raises CorruptRecord naming the key for an object that does not decode."""
        return (await self._read()).state

    async def _read(self) -> _Version[S]:
        try:
            stored = await self._store.get(self.key)
        except NotFound:
            return _Version(None, None)
        try:
            return self._decoded(stored.etag, stored.data)
        except CorruptRecord as exc:
            if not self._repairable:
                raise
            log.warning("%s; started afresh", exc)
            return _Version(stored.etag, None, 0, secrets.token_hex(8))

    def _decoded(self, etag: str, data: bytes) -> _Version[S]:
        try:
            fields = unpack(data)
            if not isinstance(fields, dict) or fields.get("v") != FORMAT:
                found = fields.get("v") if isinstance(fields, dict) else "?"
                raise ValueError(f"format {plausible.shown(found)}")
            rev = plausible.count(fields["rev"], "rev", most=plausible.MAX_REVISION)
            nonce = fields["nonce"]
            if not isinstance(nonce, str):
                raise ValueError(f"nonce is not a str: {plausible.shown(nonce)}")
        except Exception as exc:
            raise CorruptRecord(f"not a stepstone limit record: {exc}", key=self.key) from exc
        return _Version(etag, self._from_fields(fields["state"], self.key), rev, nonce)

    async def _still(self, version: _Version[S]) -> bool:
        """Whether the object is still at ``version`` (absent, if it was)."""
        try:
            etag = (await self._store.head(self.key)).etag
        except NotFound:
            return version.etag is None
        return etag == version.etag

    async def _write(self, old: _Version[S], state: S | None) -> _Version[S]:
        if state is None:
            assert old.etag is not None  # a change from absent to absent is no change
            try:
                await self._store.delete(self.key, if_match=old.etag)
            except StoreUnavailable as error:
                await landed(self._store, self.key, None, old.etag, error)
            return _Version(None, None)
        if old.etag is None:
            rev, nonce = 1, secrets.token_hex(8)
        else:
            rev, nonce = old.rev + 1, old.nonce
        data = pack({"v": FORMAT, "rev": rev, "nonce": nonce, "state": self._to_fields(state)})
        try:
            if old.etag is None:
                etag = await self._store.put_if_absent(self.key, data)
            else:
                etag = await self._store.put_if_match(self.key, data, old.etag)
        except StoreUnavailable as error:
            etag = await landed(self._store, self.key, data, old.etag, error)
        return _Version(etag, state, rev, nonce)


class KeptObjects(Generic[S]):
    """This process's SharedObjects of one kind, by key, the least recently
    used beyond ``KEPT_OBJECTS`` forgotten (costing one read when next used)."""

    def __init__(self, make: Callable[[str], SharedObject[S]]) -> None:
        self._make = make
        self._objects: OrderedDict[str, SharedObject[S]] = OrderedDict()

    def __call__(self, key: str) -> SharedObject[S]:
        found = self._objects.get(key)
        if found is not None:
            self._objects.move_to_end(key)
            return found
        made = self._objects[key] = self._make(key)
        if len(self._objects) > KEPT_OBJECTS:
            for old, kept in self._objects.items():
                if not kept.busy:  # (a busy one is kept: its updates are under way)
                    del self._objects[old]
                    break
        return made
