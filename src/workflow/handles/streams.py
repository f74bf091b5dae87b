"""Reading a run's stream from outside the run: ``handle.stream(name)``,
``runner.stream(run, name)``.

A :class:`StreamReader` reads the items a run wrote to its stream ``name``
(:mod:`stepstone.execute.streams`) in order of their offsets, from
``start``, each decoded as a step's result is (through the type the reader
is given). Following (the default), it waits for the next item and ends
when the run closes the stream or ends; without following, it ends at the
first offset not written yet.

Items are read one offset after the other, each with a GET of its key
(``streams/<run_id>/<incarnation>/<name>/<offset>``), so a reader never skips
an item written late (two branches writing at once, a write that a crash
left for the run's retry) and never reorders two. While the next item is
not there, the reader waits and looks again:

- on a directory store, Linux tells it when an item is placed
  (:class:`~stepstone.store.base.ChangeNotices`), from any process on the
  machine: it reads at once, and looks again every ``NOTICED_POLL`` seconds
  in case a notice was lost;
- on S3 it looks every ``REMOTE_POLL`` seconds (one GET, answered 404 while
  nothing is there);
- in memory, every ``LOCAL_POLL`` seconds.

At the first offset not written, and then every ``END_CHECK`` seconds of
waiting (``REMOTE_END_CHECK`` on S3), it also reads the run's outcome
record: once the run has ended, it lists what the run wrote past the
offset it waits at (an item a crash left unwritten is never written now)
and ends after those. It reads the run's queue record, too, every
``QUEUE_CHECK`` seconds, for a run that was swept or started again as
another incarnation meanwhile (the stream it reads will get no
more items).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from stepstone.errors import BadStreamItem, PayloadUnreadable, RunNotFound
from stepstone.records.calls import PositionedMemo, memo_value
from stepstone.records.codec import codec_for_type
from stepstone.records.envelope import incarnation_of
from stepstone.records.layout import check_run_id, name_key, stream_offset_of
from stepstone.records.payloads import unreadable
from stepstone.records.run_records import RunRecords
from stepstone.runtime.queue import LeaseQueue
from stepstone.store import NotFound
from stepstone.store.base import ChangeNotices

T = TypeVar("T")

REMOTE_POLL = 0.2
"""Seconds between two looks for the next item on a remote store (S3): one
GET each, so a reader waiting an hour costs 18,000 GETs at most."""
LOCAL_POLL = 0.02
"""Seconds between two looks on a store without notices (memory)."""
NOTICED_POLL = 1.0
"""Seconds between two looks on a store that notices new items (a
directory on Linux): a safety net for a lost notice."""
END_CHECK = 0.25
"""Seconds of waiting between two reads of the run's outcome record ..."""
REMOTE_END_CHECK = 1.0
"""... on a remote store."""
QUEUE_CHECK = 10.0
"""Seconds of waiting between two reads of the run's queue record."""

CLOSE = "stream-close"
"""The call of the item that ends a stream (:mod:`stepstone.execute.streams`)."""


@dataclass(frozen=True, slots=True)
class StreamItem(Generic[T]):
    """One item of a run's stream: its offset (0 for the first) and its value."""

    offset: int
    value: T


class StreamReader(Generic[T]):
    """A run's stream ``name``, read from outside the run (see the module
    docstring): ``async for value in reader``, or ``async for item in
    reader.items()`` for each value with its offset. Reading it again goes on
    from where it stopped (:attr:`offset`)."""

    def __init__(
        self,
        records: RunRecords,
        queue: LeaseQueue,
        run_id: str,
        name: str,
        output: Any = Any,
        *,
        start: int = 0,
        follow: bool = True,
        poll: float | None = None,
    ) -> None:
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ValueError(f"a stream is read from an offset >= 0, not {start!r}")
        if poll is not None and not poll > 0:
            raise ValueError(f"poll is a number of seconds > 0, not {poll!r}")
        name_key(name)  # (a name no stream can have is refused here, not at the first read)
        self._records = records
        self._queue = queue
        self._codec = codec_for_type(output)
        self._follow = follow
        self._poll = poll
        self._offset = start
        self.run_id = check_run_id(run_id)
        """The run whose stream this is."""
        self.name = name
        """The stream's name."""

    @property
    def offset(self) -> int:
        """The offset of the next item this reader reads (one past the last it gave)."""
        return self._offset

    def __aiter__(self) -> AsyncIterator[T]:
        return self._values()

    async def _values(self) -> AsyncIterator[T]:
        async for item in self.items():
            yield item.value

    async def items(self) -> AsyncIterator[StreamItem[T]]:
        """Each item from :attr:`offset` on, with its offset; see the module docstring.

        Raises RunNotFound for a run nothing is known of, and BadStreamItem,
        naming the item, for one that does not decode as the reader's type."""
        incarnation, finished = await self._incarnation()
        store = self._records.store
        prefix = self._records.layout.stream(self.run_id, incarnation, self.name)
        noticed = asyncio.Event()
        stop: Callable[[], None] | None = None
        if self._follow and isinstance(store, ChangeNotices):
            stop = store.watch_changes(prefix, lambda _: noticed.set())
        poll = self._poll or (
            REMOTE_POLL if store.remote else LOCAL_POLL if stop is None else NOTICED_POLL
        )
        end_every = REMOTE_END_CHECK if store.remote else END_CHECK
        loop = asyncio.get_running_loop()
        end_at = loop.time()  # (at the first miss: a finished run's stream ends there)
        queue_at = loop.time() + QUEUE_CHECK
        try:
            while True:
                noticed.clear()  # (before the read: a notice during it is not lost)
                found = await self._read(incarnation, self._offset)
                if found is not None:
                    if found.call.call == CLOSE:
                        return
                    yield self._item(incarnation, self._offset, found)
                    continue
                now = loop.time()
                if not self._follow or now >= end_at:
                    end_at = now + end_every
                    look_at_queue = now >= queue_at
                    if look_at_queue:
                        queue_at = now + QUEUE_CHECK
                    if finished or await self._ended(incarnation, look_at_queue):
                        async for item in self._rest(incarnation, prefix):
                            yield item
                        return
                    if not self._follow:
                        return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(noticed.wait(), poll)
        finally:
            if stop is not None:
                stop()

    def _item(self, incarnation: str, offset: int, found: PositionedMemo) -> StreamItem[T]:
        """The item ``found`` at ``offset``, decoded; the reader moves past it."""
        try:
            value = self._codec.decode(self._records.payloads.open(found.value))
        except PayloadUnreadable as exc:
            raise self._unreadable(exc, incarnation, offset) from None
        except Exception as exc:  # any error: the value is not of the reader's type
            key = self._key(incarnation, offset)
            raise BadStreamItem(self.run_id, self.name, offset, key, _why(exc)) from exc
        self._offset = offset + 1
        return StreamItem(offset, value)

    def _key(self, incarnation: str, offset: int) -> str:
        return self._records.layout.stream_item(self.run_id, incarnation, self.name, offset)

    async def _read(self, incarnation: str, offset: int) -> PositionedMemo | None:
        """The item at ``offset``; None while there is none."""
        key = self._key(incarnation, offset)
        field = memo_value(self._records.payloads)
        try:
            found = await self._records.store.get_split(key, field)
        except NotFound:
            return None
        try:
            return PositionedMemo.read_split(found, field)
        except ValueError as exc:
            raise BadStreamItem(self.run_id, self.name, offset, key, str(exc)) from None
        except PayloadUnreadable as exc:
            raise self._unreadable(exc, incarnation, offset) from None

    def _unreadable(self, exc: PayloadUnreadable, incarnation: str, offset: int) -> Exception:
        """PayloadUnreadable naming the item whose value does not open."""
        what = f"run {self.run_id}: item {offset} of stream {self.name!r}"
        return unreadable(exc, f"{what} ({self._key(incarnation, offset)})")

    async def _rest(self, incarnation: str, prefix: str) -> AsyncIterator[StreamItem[T]]:
        """The items of a stream whose run has ended, from :attr:`offset`
        on: each that stands, in order, up to its close."""
        offsets = []
        async for info in self._records.store.scan(prefix):
            offset = stream_offset_of(info.key[len(prefix) :])
            if offset is not None and offset >= self._offset:
                offsets.append(offset)
        for offset in sorted(offsets):
            found = await self._read(incarnation, offset)
            if found is None:
                continue  # (swept meanwhile)
            if found.call.call == CLOSE:
                return
            yield self._item(incarnation, offset, found)

    async def _incarnation(self) -> tuple[str, bool]:
        """The incarnation of the run whose stream is read (its outcome's, or
        its queue record's), and whether it has ended. RunNotFound when there
        is neither."""
        record = await self._records.outcome(self.run_id)
        if record is not None and record.incarnation:
            return record.incarnation, True
        queued = await self._queue.get(self.run_id)
        incarnation = None if queued is None else incarnation_of(queued.payload)
        if incarnation is None:
            raise RunNotFound(
                f"no run {self.run_id} (never submitted, or swept): it has no stream {self.name!r}"
            )
        return incarnation, False

    async def _ended(self, incarnation: str, look_at_queue: bool) -> bool:
        """Whether the run's incarnation has ended: its outcome is recorded
        (or, with ``look_at_queue``, its queue record is gone or another
        incarnation's)."""
        if await self._records.outcome(self.run_id) is not None:
            return True
        if not look_at_queue:
            return False
        queued = await self._queue.get(self.run_id)
        return queued is None or incarnation_of(queued.payload) != incarnation


def _why(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
