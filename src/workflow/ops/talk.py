"""A run's streams and callbacks, as ``stepstone show`` and the web view show them.

A stream's writes are calls of the run's history, one memo each, and a
run may make thousands: the steps a run's page lists leave them out, and
each stream is shown instead as its name, the writes recorded, whether the
run closed it, and its last items (read from the items themselves). A
callback stays among the steps (the place where the run made it), and is
shown besides with its id, its expiry and what its wait took; the record
of that (``!callback@<place>``) is no step. Never its URL: whoever holds
it can complete the callback, and a viewer of the page may not.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, replace
from typing import Any, Literal

from stepstone.errors import PayloadUnreadable
from stepstone.ops.reads import Detail, Inspected, StoredMemo, payloads_of
from stepstone.records.callbacks import CallbackId, Taken, expiry_of
from stepstone.records.calls import CALLBACK_TAKE_MEMO, PositionedMemo, memo_value
from stepstone.records.codec import codec_for_type
from stepstone.records.layout import stream_offset_of
from stepstone.store import NotFound

STREAM_CALLS = ("stream", "stream-close")
"""The calls of a stream: a write, a close."""
SHOWN_ITEMS = 5
"""A stream's last items a run's page shows."""
TAIL_SLACK = 16
"""Offsets before where a stream's writes say it ends that the look for its
last items starts at (a write that found its offset taken is further on):
one LIST of a few keys, however long the stream."""
PAGE_ITEMS = 100
"""Items a stream's own page shows at once."""

_ANY = codec_for_type(Any)

State = Literal["waiting", "completed", "expired", "too large"]


@dataclass(frozen=True, slots=True)
class ItemSeen:
    """One item of a stream: its offset, its value (as stored: a model is the
    dict it was dumped to), or why it would not decode."""

    offset: int
    value: Any = None
    unreadable: str | None = None
    written_at: float | None = None
    closes: bool = False
    """It is the stream's close, not a value."""


@dataclass(frozen=True, slots=True)
class StreamSeen:
    """One stream of a run."""

    name: str
    written: int
    """Writes the run's history records (its close not counted)."""
    closed: bool
    last: list[ItemSeen]
    """Its last items (``SHOWN_ITEMS``), oldest first."""


@dataclass(frozen=True, slots=True)
class CallbackSeen:
    """One callback of a run: its id, name and expiry, and what its wait took."""

    id: str
    name: str
    expires_at: float | None
    made_at: float | None
    state: State
    taken_at: float | None = None
    value: Any = None
    """The completion taken, decoded as JSON (its text when it is not JSON)."""
    size: int = 0
    late: bool = False
    """A completion stands that came after the wait took one: ignored."""
    unreadable: str | None = None


def shown_as_step(memo: StoredMemo) -> bool:
    """Whether a run's steps list ``memo``: not a stream's write or close
    (:func:`streams_of` shows those), not the record of a callback's take."""
    if memo.call is not None and memo.call.call in STREAM_CALLS:
        return False
    return not memo.step_key.startswith(CALLBACK_TAKE_MEMO)


def _current(found: Detail) -> list[StoredMemo]:
    return [m for m in found.memos if m.incarnation == (found.incarnation or "")]


async def streams_of(runner: Inspected, found: Detail) -> list[StreamSeen]:
    """The streams the run's current incarnation wrote, by name."""
    incarnation = found.incarnation
    if incarnation is None:
        return []
    writes: dict[str, int] = {}
    closed: set[str] = set()
    for memo in _current(found):
        if memo.call is not None and memo.call.call == "stream":
            writes[memo.call.name] = writes.get(memo.call.name, 0) + 1
        elif memo.call is not None and memo.call.call == "stream-close":
            closed.add(memo.call.name)
            writes.setdefault(memo.call.name, 0)

    async def one(name: str) -> StreamSeen:
        # Its items are at offsets 0 to about its writes: list from near the end.
        near = writes[name] + (name in closed) - SHOWN_ITEMS - TAIL_SLACK
        offsets = await _offsets(runner, found.id, incarnation, name, after=near)
        last = await _items(runner, found.id, incarnation, name, offsets[-SHOWN_ITEMS:])
        return StreamSeen(name, writes[name], name in closed, last)

    return list(await asyncio.gather(*(one(name) for name in sorted(writes))))


async def stream_items(
    runner: Inspected, run_id: str, incarnation: str, name: str, start: int | None
) -> tuple[list[ItemSeen], int]:
    """Up to ``PAGE_ITEMS`` items of a stream from offset ``start`` (None:
    its last ones), and how many items it holds."""
    offsets = await _offsets(runner, run_id, incarnation, name)
    chosen = (
        offsets[-PAGE_ITEMS:] if start is None else [o for o in offsets if o >= start][:PAGE_ITEMS]
    )
    return await _items(runner, run_id, incarnation, name, chosen), len(offsets)


async def _offsets(
    runner: Inspected, run_id: str, incarnation: str, name: str, *, after: int = -1
) -> list[int]:
    """The offsets the stream's items stand at (past ``after``), in order."""
    prefix = runner.layout.stream(run_id, incarnation, name)
    start = None if after < 0 else runner.layout.stream_item(run_id, incarnation, name, after)
    found = []
    async for info in runner.store.scan(prefix, start_after=start):
        offset = stream_offset_of(info.key[len(prefix) :])
        if offset is not None:
            found.append(offset)
    return sorted(found)


async def _items(
    runner: Inspected, run_id: str, incarnation: str, name: str, offsets: list[int]
) -> list[ItemSeen]:
    async def one(offset: int) -> ItemSeen | None:
        key = runner.layout.stream_item(run_id, incarnation, name, offset)
        payloads = payloads_of(runner)
        field = memo_value(payloads)
        try:
            memo = PositionedMemo.read_split(await runner.store.get_split(key, field), field)
            closes = memo.call.call == "stream-close"
            value = None if closes else _ANY.decode(payloads.open(memo.value))
        except NotFound:
            return None  # (swept meanwhile)
        except PayloadUnreadable as exc:
            return ItemSeen(offset, unreadable=exc.shown().strip("<>"))
        except Exception as exc:  # garbage decodes into any error
            return ItemSeen(offset, unreadable=f"{type(exc).__name__}: {exc}")
        return ItemSeen(offset, value, None, memo.ended, closes)

    found = await asyncio.gather(*(one(offset) for offset in offsets))
    return [item for item in found if item is not None]


async def callbacks_of(runner: Inspected, found: Detail) -> list[CallbackSeen]:
    """The callbacks the run's current incarnation made, in the order it made them."""
    incarnation = found.incarnation
    if incarnation is None:
        return []
    memos = _current(found)
    takes = {m.step_key.removeprefix(CALLBACK_TAKE_MEMO): m for m in memos}
    made = sorted(
        (m for m in memos if m.call is not None and m.call.call == "callback"),
        key=lambda m: (m.began or m.modified, m.branch, m.position or 0),
    )

    async def one(memo: StoredMemo) -> CallbackSeen:
        assert memo.call is not None
        callback = CallbackId.of(found.id, incarnation, memo.step_key)
        try:
            expires = expiry_of(memo.value)
        except ValueError as exc:
            return CallbackSeen(
                str(callback), memo.call.name, None, memo.began, "waiting", unreadable=str(exc)
            )
        seen = CallbackSeen(str(callback), memo.call.name, expires, memo.began, "waiting")
        take = takes.get(callback.token)
        if take is None:
            return seen
        try:
            taken = Taken.decode((await runner.store.get(take.key)).data)
        except NotFound:
            return seen
        except ValueError as exc:
            return replace(seen, unreadable=f"the record of what its wait took: {exc}")
        late = False
        if taken.took != "expired":
            try:
                info = await runner.store.head(callback.completion(runner.layout))
                late = info.etag != taken.etag
            except NotFound:
                late = False
        state: State = "too large"
        if taken.took == "completed" or taken.took == "expired":
            state = taken.took
        return replace(
            seen,
            state=state,
            taken_at=taken.at,
            value=_shown(taken.body) if taken.took == "completed" else None,
            size=taken.size,
            late=late,
        )

    return list(await asyncio.gather(*(one(memo) for memo in made)))


def _shown(body: bytes) -> Any:
    """A completion's body for people: its JSON value, else its text."""
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")
