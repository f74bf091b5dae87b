"""A run's records in the store, read and written in one place.

The outcome record is the one durable answer for a run, and the tombstone
of a swept run keeps its key from that run's zombies (see
:mod:`stepstone.records.outcome`); the progress record is the last value a run
reported, one per incarnation (as memos are), written by compare-and-swap
so that an attempt whose lease another worker took over cannot overwrite
the new owner's (it carries the claim number of the attempt that wrote it).
The submit path, the handles, the attempt runner and ``status`` all read and write
them through :class:`RunRecords`, so how they are keyed and what
"create-if-absent" means for them is said once.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stepstone.errors import CorruptOutcome, PayloadUnreadable
from stepstone.records.codec import pack, unpack
from stepstone.records.large_values import write
from stepstone.records.layout import Layout
from stepstone.records.outcome import (
    OutcomeRecord,
    Tombstone,
    decode_outcome_key,
    outcome_result,
    read_outcome_key,
)
from stepstone.records.payloads import Payloads
from stepstone.runtime import plausible
from stepstone.store import AlreadyExists, NotFound, ObjectStore, PreconditionFailed

SEEN_ENDED = 10_000
"""Runs whose outcome record a RunRecords read or wrote, remembered (the
newest) for ``seen_ended``."""


@dataclass(frozen=True, slots=True)
class AtOutcomeKey:
    """What a run's outcome key holds: nothing, its record, or the tombstone
    of a swept run; and the etag to replace it by."""

    content: OutcomeRecord | Tombstone | None
    etag: str = ""


class RunRecords:
    """Outcome and progress records of runs under one layout in one store."""

    def __init__(
        self, store: ObjectStore, layout: Layout, payloads: Payloads | None = None
    ) -> None:
        self.store = store
        self.layout = layout
        self.payloads = payloads if payloads is not None else Payloads()
        """What seals the payloads this process writes and opens those it
        reads (:mod:`stepstone.records.payloads`)."""
        self._ended: OrderedDict[str, None] = OrderedDict()

    def seen_ended(self, run_id: str) -> bool:
        """Whether this process read or wrote the run's outcome record lately:
        a hint (a sweep may have removed it since) that a resubmission of its
        key will find it (:mod:`stepstone.submit.look_first`)."""
        return run_id in self._ended

    def _saw(self, record: OutcomeRecord | None) -> OutcomeRecord | None:
        if record is not None:
            self._ended[record.run_id] = None
            self._ended.move_to_end(record.run_id)
            if len(self._ended) > SEEN_ENDED:
                self._ended.popitem(last=False)
        return record

    async def at_outcome_key(self, run_id: str) -> AtOutcomeKey:
        """What the run's outcome key holds. Raises CorruptOutcome, naming the
        key, when the object there is no record this library reads."""
        key = self.layout.outcome(run_id)
        field = outcome_result(self.payloads)
        try:
            found = await self.store.get_split(key, field)
        except NotFound:
            return AtOutcomeKey(None)
        try:
            return AtOutcomeKey(read_outcome_key(found, field), found.etag)
        except ValueError as exc:
            raise CorruptOutcome(key, str(exc)) from None

    async def outcomes(self, run_ids: Sequence[str]) -> list[OutcomeRecord | CorruptOutcome | None]:
        """Each run's outcome record (None: it has none), read together
        (``get_many``); an object that is no record this library reads comes
        back as the CorruptOutcome that ``outcome`` would raise."""
        keys = [self.layout.outcome(run_id) for run_id in run_ids]
        found: list[OutcomeRecord | CorruptOutcome | None] = []
        for key, stored in zip(keys, await self.store.get_many(keys), strict=True):
            content: OutcomeRecord | Tombstone | None = None
            if stored is not None:
                try:
                    content = decode_outcome_key(stored.data)
                except ValueError as exc:
                    found.append(CorruptOutcome(key, str(exc)))
                    continue
            found.append(self._saw(content if isinstance(content, OutcomeRecord) else None))
        return found

    async def outcome(self, run_id: str, input_hash: str | None = None) -> OutcomeRecord | None:
        """The run's outcome record, or None while it has none (a swept run's
        tombstone is none).

        Raises CorruptOutcome, naming the key, when the object there is no
        record this library reads, or (given the run's ``input_hash``) when
        it records a run of another input: that is no answer for this run.
        """
        content = (await self.at_outcome_key(run_id)).content
        if not isinstance(content, OutcomeRecord):
            return None
        return self._saw(answering(content, self.layout.outcome(run_id), input_hash))

    async def record_outcome(self, record: OutcomeRecord) -> OutcomeRecord | None:
        """Write ``record`` unless the run already has an outcome: the first
        writer's answer is the answer. Returns the record that stands, or None
        when the run was swept while this attempt ran (its tombstone stands:
        the attempt is a zombie, and the key's next run must not get its
        answer). Another run's tombstone is replaced: this is the key's next run.

        Raises CorruptOutcome when what stands is no record this library
        reads, or records another input than ``record``'s.
        """
        key = self.layout.outcome(record.run_id)
        data = record.encode()
        while True:
            try:
                await write(self.store, key, data, if_absent=True)
                return self._saw(record)
            except AlreadyExists:
                pass
            found = await self.at_outcome_key(record.run_id)
            content = found.content
            if isinstance(content, OutcomeRecord):
                return self._saw(answering(content, key, record.input_hash))
            if isinstance(content, Tombstone):
                if content.incarnation == record.incarnation and record.incarnation:
                    return None
                with contextlib.suppress(PreconditionFailed, NotFound):
                    await write(self.store, key, data, if_match=found.etag)
                    return self._saw(record)
            # Removed or replaced since we looked: look again.

    async def clear_tombstone(self, run_id: str, etag: str) -> None:
        """Remove the run's own tombstone (the object of ``etag``), for an
        attempt that begins after its run was swept: the run runs again. (So
        too the outcome of the incarnation a replay replaces.)"""
        with contextlib.suppress(PreconditionFailed, NotFound):
            await self.store.delete(self.layout.outcome(run_id), if_match=etag)

    async def progress(self, run_id: str, incarnation: str) -> Any:
        """The last progress value the run's ``incarnation`` reported, or None
        (also when the record does not decode: progress only informs)."""
        try:
            stored = await self.store.get(self.layout.progress(run_id, incarnation))
        except NotFound:
            return None
        return self.opened(progress_value(stored.data))

    def opened(self, value: Any) -> Any:
        """A value a record holds sealed (a run's progress) opened; None when
        it does not open here (it only informs: ``stepstone show`` says what
        sealed it)."""
        try:
            return self.payloads.open_value(value)
        except PayloadUnreadable:
            return None

    async def write_progress(
        self, run_id: str, incarnation: str, claims: int, value: Any, etag: str | None
    ) -> str | None:
        """Record ``value`` as the progress of the run's ``incarnation``, for
        the attempt of claim number ``claims``: a compare-and-swap on ``etag``,
        the attempt's last write (None before its first).

        Returns the new etag; None when a later claim of the run has written
        since, so this attempt is a zombie (its lease lapsed and another worker
        took the run over) and must not overwrite it: it writes no more.
        """
        key = self.layout.progress(run_id, incarnation)
        data = pack({"claims": claims, "value": self.payloads.seal_value(value)})
        while True:
            try:
                if etag is None:
                    return await self.store.put_if_absent(key, data)
                return await self.store.put_if_match(key, data, etag)
            except (PreconditionFailed, NotFound):  # AlreadyExists is a PreconditionFailed
                pass
            try:
                current = await self.store.get(key)
            except NotFound:
                etag = None  # removed since: create it
                continue
            if _progress_claims(current.data) > claims:
                return None
            etag = current.etag  # an earlier claim's (or no record at all): replace it


def progress_value(data: bytes) -> Any:
    """The value a progress record holds; None when it holds none."""
    try:
        raw = unpack(data)
    except Exception:
        return None
    return raw.get("value") if isinstance(raw, dict) else None


def _progress_claims(data: bytes) -> int:
    """The claim number of the attempt that wrote a progress record (0: unreadable)."""
    try:
        raw = unpack(data)
    except Exception:
        return 0
    claims = raw.get("claims") if isinstance(raw, dict) else None
    try:
        return plausible.count(claims, "claims")
    except plausible.Implausible:  # (a claim number no run has: the record is replaced)
        return 0


def answering(record: OutcomeRecord, key: str, input_hash: str | None) -> OutcomeRecord:
    """``record`` if it can answer a run of ``input_hash`` (unknown: None or
    empty); CorruptOutcome naming ``key`` if it records another input's run."""
    if input_hash and record.input_hash != input_hash:
        raise CorruptOutcome(
            key,
            f"it records a run of another input (job {record.kind!r}, input hash "
            f"{record.input_hash[:12]}..., not {input_hash[:12]}...)",
        )
    return record
