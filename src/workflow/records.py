"""A run's records in the store, read and written in one place.

The outcome record is the one durable answer for a run (see
:mod:`stepstone.outcome`); the progress record is the last value a run
reported. The submit path, the handles, the executor and ``status`` all
read and write them through :class:`RunRecords`, so how they are keyed and
what "create-if-absent" means for them is said once.
"""

from __future__ import annotations

import contextlib
from typing import Any

from stepstone.store import AlreadyExists, NotFound, ObjectStore

from .codec import pack, unpack
from .errors import CorruptOutcome
from .layout import Layout
from .outcome import OutcomeRecord


class RunRecords:
    """Outcome and progress records of runs under one layout in one store."""

    def __init__(self, store: ObjectStore, layout: Layout) -> None:
        self.store = store
        self.layout = layout

    async def outcome(self, run_id: str, input_hash: str | None = None) -> OutcomeRecord | None:
        """The run's outcome record, or None while it has none.

        Raises CorruptOutcome, naming the key, when the object there is no
        record this library reads, or (given the run's ``input_hash``) when
        it records a run of another input: that is no answer for this run.
        """
        key = self.layout.outcome(run_id)
        try:
            stored = await self.store.get(key)
        except NotFound:
            return None
        try:
            record = OutcomeRecord.decode(stored.data)
        except ValueError as exc:
            raise CorruptOutcome(key, str(exc)) from None
        return answering(record, key, input_hash)

    async def record_outcome(self, record: OutcomeRecord) -> OutcomeRecord:
        """Write ``record`` unless the run already has an outcome: the first
        writer's answer is the answer. Returns the record that stands.

        Raises CorruptOutcome when what stands is no record this library
        reads, or records another input than ``record``'s.
        """
        key = self.layout.outcome(record.run_id)
        while True:
            try:
                await self.store.put_if_absent(key, record.encode())
            except AlreadyExists:
                existing = await self.outcome(record.run_id, record.input_hash)
                if existing is None:
                    continue  # removed since: try again
                return existing
            return record

    async def progress(self, run_id: str) -> Any:
        """The last progress value the run reported, or None."""
        with contextlib.suppress(NotFound):
            return unpack((await self.store.get(self.layout.progress(run_id))).data)
        return None

    async def write_progress(self, run_id: str, value: Any) -> None:
        await self.store.put(self.layout.progress(run_id), pack(value))


def answering(record: OutcomeRecord, key: str, input_hash: str | None) -> OutcomeRecord:
    """``record`` if it can answer a run of ``input_hash`` (unknown: None or
    empty); CorruptOutcome naming ``key`` if it records another input's run."""
    if input_hash and record.input_hash != input_hash:
        raise CorruptOutcome(
            key,
            f"it records a run of another input (job {record.name!r}, input hash "
            f"{record.input_hash[:12]}..., not {input_hash[:12]}...)",
        )
    return record
