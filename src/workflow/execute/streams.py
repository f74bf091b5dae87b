"""Streams: values a run hands out while it runs, in order, to readers anywhere.

``ctx.stream(name)`` is the run's stream ``name`` (a :class:`StreamWriter`);
``await stream.write(value)`` appends ``value``, encoded as a step's result
is, and ``await stream.close()`` ends the stream: its readers stop there
(without it, they stop when the run ends). Readers are
:mod:`stepstone.handles.streams`'.

Each write is a call of the run's history, as a step is
(:mod:`stepstone.records.calls`, ``stream``): it takes the next position in
its branch, and its memo records the **offset** it means to write its item
at, before the item is written. The item is an object of its own,
``streams/<run_id>/<incarnation>/<name>/<offset>``, written create-if-absent,
and records the call's place (its branch and position) beside its value.
So:

- a replay finds the memo and writes nothing: the item is there (read back
  to make sure), or the attempt before died between its two writes and the
  replay writes it now, at the offset recorded;
- two attempts making the same write at once (a zombie whose lease lapsed,
  and the attempt that took the run over) record one offset: the first memo
  wins, and the other writer follows it;
- an offset that another call took first (only another attempt writing at
  the same time can) moves the item on to the next offset not taken by
  another call. Items never change once written, so every writer of one
  call walks the same offsets past the same items and stops at the same
  one: a call has one item, whoever writes it.

Offsets are dense, 0, 1, 2, ...: an attempt takes them one after another, a
first claim from 0 and any later one from past the stream's last item (one
listing, on its first write that is not a replay), after the offsets an
earlier attempt took and did not write at (it was stopped from outside, or
died, in between). A write once begun is finished as a step is when its
attempt ends (a concurrent branch's wait that suspends the run, a failure):
only a stop from outside (a cancel, a timeout, a lost lease) or a crash
leaves an offset unwritten, and the run's next attempt fills it. Concurrent
writes of one attempt (branches writing one stream) take distinct offsets
at once, and each lands when its PUT does: a reader reads offsets in order
(:mod:`stepstone.handles.streams`), so an item whose write is slower (or
left for the next attempt) holds up the ones after it, never reorders them.

A write costs two PUTs (the memo, the item); a replayed write a GET of the
memo, as any call's, and a GET of its item.
"""

from __future__ import annotations

import enum
from typing import Any, Generic, TypeVar

from stepstone.errors import EncodingError, PayloadUnreadable, StreamClosed
from stepstone.execute import branches
from stepstone.execute.memos import Memo
from stepstone.execute.scope import AttemptScope, StreamState
from stepstone.records.calls import PositionedMemo, memo_value
from stepstone.records.codec import ResultCodec, codec_for_type
from stepstone.records.large_values import write
from stepstone.records.layout import stream_offset_of
from stepstone.store import AlreadyExists, NotFound
from stepstone.store.parts import Body

T = TypeVar("T")

WRITE = "stream"
"""The call a write is (:class:`stepstone.records.calls.Call`)."""
CLOSE = "stream-close"
"""The call a close is: its item ends the stream."""

_OFFSET = codec_for_type(int)
_NONE = codec_for_type(type(None))


class StreamWriter(Generic[T]):
    """One named stream of the running run, to write to: ``ctx.stream(name)``.

    ``await write(value)`` appends ``value`` (encoded as a step's result is,
    through ``type`` when the stream was given one, else through the
    value's own type); ``await close()`` ends the stream for its readers.
    Each is a call of the run's history: a retried or replayed attempt that
    comes back to it writes nothing twice."""

    def __init__(self, run: AttemptScope, name: str, output: Any = None) -> None:
        self._run = run
        self._codec: ResultCodec | None = None if output is None else codec_for_type(output)
        self.name = name
        """The stream's name."""

    async def write(self, value: T) -> None:
        """Append ``value`` to the stream, once for this run: a replay of the
        run that comes back here writes nothing. Raises EncodingError for a
        value that cannot be stored (nothing written), StreamClosed after
        ``close``."""
        state = self._run.stream_state(self.name)
        if state.closed:
            raise StreamClosed(self._run.run_id, self.name)
        codec = self._codec or codec_for_type(type(value))
        try:
            data = self._run.records.payloads.seal(codec.encode_body(value))
        except (TypeError, ValueError) as exc:
            raise EncodingError(
                f"a value written to stream {self.name!r} cannot be stored: {exc}",
                job=self._run.kind,
            ) from exc
        await _append(self._run, state, self.name, WRITE, data)

    async def close(self) -> None:
        """End the stream: its readers stop once they have read what was
        written before, and a later write raises StreamClosed. Closing a
        closed stream does nothing."""
        state = self._run.stream_state(self.name)
        if state.closed:
            return
        await _append(self._run, state, self.name, CLOSE, _NONE.encode_body(None))
        state.closed = True


async def _append(run: AttemptScope, state: StreamState, name: str, call: str, data: Body) -> None:
    """Record the call (its memo: the offset of its item), then write its
    item. Once begun, it is finished as a step is when the attempt ends
    (:func:`stepstone.execute.branches.step_begins`): a branch's wait that
    suspends the run leaves no offset taken and not written."""
    memo = Memo(run, name, _OFFSET, internal=call)
    begun = branches.step_begins(run.tree)
    try:
        found, offset = await memo.lookup()
        if found:
            if call == CLOSE:
                state.closed = True
            await _place(run, state, memo, offset, data, look_first=True)
            return
        chosen = await _next_offset(run, state, name)
        try:
            offset = await memo.record(chosen)  # (another attempt's, if it recorded the call first)
        except BaseException:
            state.give_back(chosen)
            raise
        if offset != chosen:
            state.give_back(chosen)
        await _place(run, state, memo, offset, data, look_first=offset != chosen)
    finally:
        branches.step_ends(run.tree, begun)


async def _next_offset(run: AttemptScope, state: StreamState, name: str) -> int:
    """The offset this attempt takes next in the stream: one no item holds.
    A first claim's streams start empty; any later claim lists the stream
    once, and takes the offsets an earlier attempt left free first (it took
    them and ended before it wrote there), then those past the last item."""
    if state.next is None:
        if run.memo_keys is None:  # (a first claim: no attempt wrote before it)
            state.next = 0
        else:
            async with state.lock:
                if state.next is None:
                    present = await _offsets(run, name)
                    state.next = max(present, default=-1) + 1
                    state.free = sorted(set(range(state.next)) - present)
    return state.take()


async def _offsets(run: AttemptScope, name: str) -> set[int]:
    """The offsets the stream's items stand at."""
    prefix = run.layout.stream(run.run_id, run.incarnation, name)
    found = set()
    async for info in run.store.scan(prefix):
        offset = stream_offset_of(info.key[len(prefix) :])
        if offset is not None:
            found.add(offset)
    return found


async def _place(
    run: AttemptScope, state: StreamState, memo: Memo, offset: int, data: Body, *, look_first: bool
) -> None:
    """Write the call's item at ``offset``, or at the first offset after it
    that no other call's item holds (see the module docstring); with
    ``look_first``, read before writing (it may stand already)."""
    assert memo.position is not None
    item = PositionedMemo(
        memo.position,
        memo.call,
        data,
        memo.branch,
        None,
        run.code_version,
        memo.began,
        run.clock.now(),
    ).encode()
    while True:
        key = run.layout.stream_item(run.run_id, run.incarnation, memo.name, offset)
        if look_first:
            there = await _look(run, key, memo)
            if there is _Slot.MINE:
                break
            if there is _Slot.OTHER:
                offset += 1
                continue
        try:
            await write(run.store, key, item, if_absent=True)
            break
        except AlreadyExists:
            look_first = True  # (look at what stands there: this call's, or another's)
    state.taken(offset)


class _Slot(enum.Enum):
    FREE = "free"
    MINE = "mine"
    OTHER = "other"


async def _look(run: AttemptScope, key: str, memo: Memo) -> _Slot:
    """What stands at ``key``: nothing, this call's item (written by this
    call before, or by another attempt's of the same call), or another's
    (an object that is no item at all counts as another's: it is passed)."""
    field = memo_value(run.records.payloads)
    try:
        found = PositionedMemo.read_split(await run.store.get_split(key, field), field)
    except NotFound:
        return _Slot.FREE
    except (ValueError, PayloadUnreadable):
        return _Slot.OTHER
    mine = (found.position, found.branch, found.call) == (memo.position, memo.branch, memo.call)
    return _Slot.MINE if mine else _Slot.OTHER
