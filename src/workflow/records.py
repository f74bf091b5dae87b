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

    async def outcome(self, run_id: str) -> OutcomeRecord | None:
        """The run's outcome record, or None while it has none. Raises
        CorruptOutcome, naming the key, when the object there is no record
        this library reads."""
        key = self.layout.outcome(run_id)
        try:
            stored = await self.store.get(key)
        except NotFound:
            return None
        try:
            return OutcomeRecord.decode(stored.data)
        except ValueError as exc:
            raise CorruptOutcome(key, str(exc)) from None

    async def record_outcome(self, record: OutcomeRecord) -> OutcomeRecord:
        """Write ``record`` unless the run already has an outcome: the first
        writer's answer is the answer. Returns the record that stands; raises
        CorruptOutcome when what stands is no record this library reads."""
        try:
            await self.store.put_if_absent(self.layout.outcome(record.run_id), record.encode())
        except AlreadyExists:
            existing = await self.outcome(record.run_id)
            if existing is not None:
                return existing
        return record

    async def progress(self, run_id: str) -> Any:
        """The last progress value the run reported, or None."""
        with contextlib.suppress(NotFound):
            return unpack((await self.store.get(self.layout.progress(run_id))).data)
        return None

    async def write_progress(self, run_id: str, value: Any) -> None:
        await self.store.put(self.layout.progress(run_id), pack(value))
