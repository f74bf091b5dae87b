"""Bodies made of parts, and reads that land a large piece in one allocation.

A large value (a step's result of many megabytes) is stored inside a record:
a few bytes of header, the value's bytes, perhaps a few more fields. Joining
them into one ``bytes`` would copy the value once more, and a record read
back as one ``bytes`` would be copied again to take the value out of it:
each copy is the value's size in memory again. So a record with a large
value is written as :class:`Parts`, its buffers one after another where
they lie, and read back with :meth:`stepstone.store.ObjectStore.get_split`,
which gives the large piece its own allocation, filled in place
(:func:`filled`).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

Buffer = bytes | memoryview


class Parts:
    """A body of several buffers, one after another: what ``put_parts``
    writes, without joining them."""

    __slots__ = ("buffers", "size")

    def __init__(self, buffers: Iterable[Buffer | Parts]) -> None:
        flat: list[Buffer] = []
        for buffer in buffers:
            if isinstance(buffer, Parts):
                flat.extend(buffer.buffers)
            elif len(buffer):
                flat.append(buffer)
        self.buffers: tuple[Buffer, ...] = tuple(flat)
        self.size = sum(len(b) for b in self.buffers)

    def __len__(self) -> int:
        return self.size

    def join(self) -> bytes:
        """The body as one ``bytes`` (a copy: for stores that keep one)."""
        return b"".join(self.buffers)

    def equals(self, data: bytes) -> bool:
        """Whether ``data`` holds exactly this body, compared without joining it."""
        if len(data) != self.size:
            return False
        view = memoryview(data)
        offset = 0
        for buffer in self.buffers:
            if view[offset : offset + len(buffer)] != buffer:
                return False
            offset += len(buffer)
        return True

    def slices(self, size: int) -> Iterator[Parts]:
        """The body cut into pieces of ``size`` bytes (the last one shorter),
        each a view of these buffers: the parts of a multipart upload."""
        piece: list[Buffer] = []
        room = size
        for buffer in self.buffers:
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


@dataclass(frozen=True, slots=True)
class Split:
    """Where a record's large piece lies in it: ``start`` and ``length``
    (bytes), as read from the record's first bytes by a
    :data:`Splitter`."""

    start: int
    length: int


Splitter = Callable[[bytes], Split | None]
"""Reads an object's first bytes (at most ``SPLIT_LOOK`` of them, all of it if
it is shorter) and says where its large piece lies, or None (none: the
object is read whole)."""

SPLIT_LOOK = 64 * 1024
"""How many of an object's first bytes a splitter is shown."""


@dataclass(frozen=True, slots=True)
class SplitObject:
    """An object read in three pieces: before the large piece, the piece
    (its own allocation), and after it. Without a split, ``before`` is the
    whole object and the others are empty."""

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
