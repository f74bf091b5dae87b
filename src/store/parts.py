"""Bodies made of parts, and reads that land a large piece in one allocation.

A large value (a step's result of many megabytes) is stored inside a record:
a few bytes of header, the value's bytes, perhaps a few more fields. Joining
them into one ``bytes`` would copy the value once more, and a record read
back as one ``bytes`` would be copied again to take the value out of it:
each copy is the value's size in memory again. So a record with a large
value is written as :class:`Parts`, its buffers one after another where
they lie, and read back with :meth:`stepstone.store.ObjectStore.get_split`,
which gives the large piece its own allocation, filled in place
(:func:`filled`), or hands its bytes, as they are read, to whatever decodes
them (``Split.into``).

A value can also be encoded as it is written (a pydantic model holding a
large ``str`` or list, whose encoding made whole would be its size again):
its part of the body is then a :class:`Stream`, pieces made one after
another as the store writes them, its size counted first.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

Buffer = bytes | memoryview


class Stream:
    """``size`` bytes made as they are read: ``produce()`` yields them in
    pieces, the same pieces each time it is called, so a write can start
    over (a retry; a checksum read before the send). Held in :class:`Parts`."""

    __slots__ = ("produce", "size")

    def __init__(self, size: int, produce: Callable[[], Iterable[Buffer]]) -> None:
        self.size = size
        self.produce = produce

    def __len__(self) -> int:
        return self.size

    def pieces(self) -> Iterator[Buffer]:
        """What ``produce`` yields, checked to come to ``size``: bytes that do
        not (a value changed since it was counted) raise ValueError rather
        than be written under a length that misdescribes them."""
        made = 0
        for piece in self.produce():
            made += len(piece)
            if made > self.size:
                break
            yield piece
        if made != self.size:
            raise ValueError(f"a streamed body made {made} bytes where {self.size} were counted")


class Parts:
    """A body of several buffers, one after another: what ``put_parts``
    writes, without joining them. A buffer may be a :class:`Stream`;
    :meth:`chunks` gives every byte in order either way."""

    __slots__ = ("buffers", "size")

    def __init__(self, buffers: Iterable[Buffer | Stream | Parts]) -> None:
        flat: list[Buffer | Stream] = []
        for buffer in buffers:
            if isinstance(buffer, Parts):
                flat.extend(buffer.buffers)
            elif len(buffer):
                flat.append(buffer)
        self.buffers: tuple[Buffer | Stream, ...] = tuple(flat)
        self.size = sum(len(b) for b in self.buffers)

    def __len__(self) -> int:
        return self.size

    def chunks(self) -> Iterator[Buffer]:
        """The body's bytes in order, a stream's as it makes them."""
        for buffer in self.buffers:
            if isinstance(buffer, Stream):
                yield from buffer.pieces()
            else:
                yield buffer

    def join(self) -> bytes:
        """The body as one ``bytes`` (a copy: for stores that keep one)."""
        return b"".join(self.chunks())

    def equals(self, data: bytes) -> bool:
        """Whether ``data`` holds exactly this body, compared without joining it."""
        if len(data) != self.size:
            return False
        view = memoryview(data)
        offset = 0
        for buffer in self.chunks():
            if view[offset : offset + len(buffer)] != buffer:
                return False
            offset += len(buffer)
        return True

    def slices(self, size: int) -> Iterator[Parts]:
        """The body cut into pieces of ``size`` bytes (the last one shorter),
        each a view of these buffers, made as they are asked for: the parts
        of a multipart upload."""
        piece: list[Buffer] = []
        room = size
        for buffer in self.chunks():
            view = memoryview(buffer)
            while view:
                taken, view = view[:room], view[room:]
                piece.append(taken)
                room -= len(taken)
                if room == 0:
                    yield Parts(piece)
                    piece, room = [], size
        if piece:
            yield Parts(piece)


Body = bytes | Parts
"""What a write takes: one ``bytes``, or :class:`Parts`."""


def as_bytes(body: Body) -> bytes:
    return body if isinstance(body, bytes) else body.join()


Sink = Callable[[memoryview], None]
"""Takes a large piece's bytes as they are read, in order, in views it may
not keep (the reader fills the same buffer again)."""


@dataclass(frozen=True, slots=True)
class Split:
    """Where a record's large piece lies in it: ``start`` and ``length``
    (bytes), as read from the record's first bytes by a
    :data:`Splitter`; and, with ``into``, where its bytes go as they are
    read instead of into an allocation of their own (the piece is then
    read as empty)."""

    start: int
    length: int
    into: Sink | None = None


Splitter = Callable[[bytes], Split | None]
"""Reads an object's first bytes (at most ``SPLIT_LOOK`` of them, all of it if
it is shorter) and says where its large piece lies, or None (none: the
object is read whole)."""

SPLIT_LOOK = 64 * 1024
"""How many of an object's first bytes a splitter is shown."""

FEED = 1 << 20
"""How many bytes of a large piece a :data:`Sink` is handed at a time."""


def feed(into: Sink, data: Buffer) -> None:
    """``data`` handed to ``into`` ``FEED`` bytes at a time."""
    view = memoryview(data)
    for at in range(0, len(view), FEED):
        into(view[at : at + FEED])


@dataclass(frozen=True, slots=True)
class SplitObject:
    """An object read in three pieces: before the large piece, the piece
    (its own allocation; empty when its bytes went to ``Split.into``), and
    after it. Without a split, ``before`` is the whole object and the
    others are empty."""

    key: str
    before: bytes
    piece: bytes
    after: bytes
    etag: str


def split_in_memory(key: str, data: bytes, etag: str, splitter: Splitter) -> SplitObject:
    """``data`` cut where ``splitter`` says (copies: for stores that hold the bytes)."""
    split = splitter(data[:SPLIT_LOOK])
    if split is None or split.start + split.length > len(data):
        return SplitObject(key, data, b"", b"", etag)
    end = split.start + split.length
    if split.into is not None:
        feed(split.into, memoryview(data)[split.start : end])
        return SplitObject(key, data[: split.start], b"", data[end:], etag)
    return SplitObject(key, data[: split.start], data[split.start : end], data[end:], etag)


class Allocation:
    """A ``bytes`` of ``size`` to be written in place through ``view`` and
    then taken, without a copy (:meth:`taken`): a BytesIO grown once to
    ``size`` lends its buffer writable (``getbuffer``) and then gives it away
    as it is (``getvalue``). (On an interpreter that copies there, it costs
    a copy, nothing more.)"""

    def __init__(self, size: int) -> None:
        self._out = io.BytesIO()
        if size:
            self._out.seek(size - 1)
            self._out.write(b"\0")
        self.view = self._out.getbuffer()

    def taken(self) -> bytes:
        self.view.release()
        data = self._out.getvalue()
        self._out.close()
        return data

    def drop(self) -> None:
        """Give the buffer up unfilled (the read failed)."""
        self.view.release()
        self._out.close()


def filled(size: int, fill: Callable[[memoryview], None]) -> bytes:
    """A ``bytes`` of ``size`` that ``fill`` writes into in place (an :class:`Allocation`)."""
    allocation = Allocation(size)
    try:
        fill(allocation.view)
    except BaseException:
        allocation.drop()
        raise
    return allocation.taken()
