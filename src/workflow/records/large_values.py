"""Records that hold a large value, written and read without copying it.

A step's memo holds its encoded result and an outcome record the job's;
both are MessagePack maps, the value one ``bin`` field among small ones.
Packed as one ``bytes``, a value of many megabytes would be copied once
into its encoding and again into the record, and read back, copied out of
the record and again out of its encoding: each copy is the value's size in
memory once more. So from :data:`SEPARATE` bytes on:

- **written** as :class:`stepstone.store.parts.Parts`: the record's small
  fields packed, then the field's ``bin`` header, then the value's bytes
  where they lie (a ``bytes`` result is its own encoding's body: its header
  and itself, :func:`value_body`); any other value's encoding is made as
  it is written, a piece at a time (:func:`pack_body`,
  :mod:`stepstone.records.piecewise`); the store writes the buffers one
  after another (``put_parts``);
- **read** with ``get_split`` and a :class:`LargeField`, which finds the
  field in the record's first bytes; the rest is decoded as a small record
  with an empty field in the value's place, and the value is put back
  (:func:`rejoined`). A ``bytes`` result stored inside its field (a
  memo's) is found inside it, so it is read straight into the ``bytes``
  the job gets back. Any other value is decoded as its bytes are read (an
  ``Unpacker`` fed a read buffer at a time lets go of what it has
  decoded), so its encoding is never whole beside it: it comes back
  :class:`Unpacked`. (One large ``str`` is the exception CPython makes:
  a ``str`` is built from its bytes held whole, so for as long as it is
  decoded, its encoding and itself are both in memory.)

The bytes stored are the same as ``pack`` makes: readers of either form
read both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from stepstone.errors import PayloadUnreadable
from stepstone.records.payloads import MARK, Opening, Payloads
from stepstone.records.piecewise import EncodedValue, encoded_size, sized_header
from stepstone.store import ObjectStore
from stepstone.store.parts import Allocation, Body, Parts, Split, SplitObject, Stream, feed

SEPARATE = 1 << 20
"""The size from which a value is kept as its own buffer in the records it is
written in, and read into its own allocation."""

LARGEST = (1 << 32) - 1 - 64 * 1024
"""The largest encoded value a record holds: MessagePack's ``bin`` takes
under 4 GiB, less room for the fields of the record it is in."""

EMPTY_BIN = b"\xc4\x00"


def _pack(value: object) -> bytes:
    """(``stepstone.records.codec.pack``, which stands on this module.)"""
    return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]


def bin_header(size: int) -> bytes:
    """The MessagePack header of a ``bin`` of ``size`` bytes; ValueError past
    :data:`LARGEST`."""
    if size > LARGEST:
        raise ValueError(f"{size} bytes encoded: a stored value takes at most {LARGEST}")
    return sized_header(size, b"\xc4", b"\xc5", b"\xc6")


def _bin_at(data: bytes, at: int) -> tuple[int, int] | None:
    """The ``bin`` at ``at`` in ``data``: its length and its header's; None if
    none starts there."""
    widths = {0xC4: 1, 0xC5: 2, 0xC6: 4}
    if at >= len(data) or data[at] not in widths:
        return None
    width = widths[data[at]]
    if at + 1 + width > len(data):
        return None
    return int.from_bytes(data[at + 1 : at + 1 + width], "big"), 1 + width


def is_large(value: object) -> bool:
    return isinstance(value, Parts) or (isinstance(value, bytes) and len(value) >= SEPARATE)


def value_body(value: bytes) -> Body:
    """``pack(value)`` for a ``bytes`` value: from ``SEPARATE`` bytes on, its
    header and the value itself, not a copy."""
    if len(value) < SEPARATE:
        return _pack(value)
    return Parts([bin_header(len(value)), value])


def pack_body(value: object, bound: int, *, private: bool = False) -> Body:
    """``pack(value)``, where ``bound`` is a size its encoding does not pass
    (``stepstone.records.piecewise.native_bound``). Below ``SEPARATE``, the
    encoding made whole; from it on, counted and then made again as it is
    written, a piece at a time (an :class:`EncodedValue`): made whole, it
    would be in memory beside the value. ``private``: the value's lists
    and maps are held by nothing else (:class:`EncodedValue`)."""
    if bound >= SEPARATE:
        size = encoded_size(value)
        if size >= SEPARATE:
            return Parts([EncodedValue(value, size, private=private)])
    packer = msgpack.Packer(use_bin_type=True, autoreset=False)
    packer.pack(value)
    view = packer.getbuffer()
    data = bytes(view)
    view.release()
    return data


def unpacked_bytes(body: Parts) -> bytes | None:
    """The ``bytes`` value a body made by :func:`value_body` (or rejoined so)
    holds, without a copy; None when it is no such body."""
    if len(body.buffers) != 2:
        return None
    header, value = body.buffers
    if isinstance(header, Stream) or isinstance(value, Stream):
        return None
    if bytes(header) != bin_header(len(value)):
        return None
    return value if isinstance(value, bytes) else bytes(value)


def record_body(fields: dict[str, Any], large: str) -> Body:
    """``pack(fields)``, with field ``large`` (bytes or Parts) kept as its own
    buffers when it is large."""
    if not is_large(fields[large]):
        return _pack(fields)
    packer = msgpack.Packer(use_bin_type=True)
    buffers: list[bytes | Parts] = []
    small = bytearray(packer.pack_map_header(len(fields)))
    for key, item in fields.items():
        small += packer.pack(key)
        if key != large:
            small += packer.pack(item)
            continue
        small += bin_header(len(item))
        buffers += [bytes(small), item]
        small = bytearray()
    buffers.append(bytes(small))
    return Parts(buffers)


@dataclass(frozen=True, slots=True)
class Unpacked:
    """A large value decoded as it was read (:class:`LargeField`): the
    MessagePack value ``value``, from an encoding of ``size`` bytes."""

    value: Any
    size: int

    def __len__(self) -> int:
        return self.size


Stored = Body | Unpacked
"""A value as a record holds it: its encoding, or decoded as it was read."""


class _Unpacking:
    """A value's encoding decoded as its bytes come in (a ``Sink``): an
    ``Unpacker`` fed a read buffer at a time keeps only what it has not yet
    decoded. A fault is kept, not raised (it would be taken for the
    store's), and the rest of the bytes passed over."""

    def __init__(self, size: int) -> None:
        # (max_buffer_size 0: up to 4 GiB, past the largest value stored)
        self._unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=0)
        self._size = size
        self.fed = 0
        """How many bytes it was handed."""
        self._value: Any = None
        self._done = False
        self._fault: Exception | None = None

    def __call__(self, view: memoryview) -> None:
        self.fed += len(view)
        if self._fault is not None:
            return
        try:
            if self._done:
                raise ValueError("bytes past the end of the value")
            self._unpacker.feed(view)
            self._value = self._unpacker.unpack()
            self._done = True
        except msgpack.OutOfData:
            pass
        except Exception as exc:  # garbage decodes into any error
            self._fault = exc

    def unpacked(self) -> Unpacked:
        """The value; ValueError saying what is wrong when its bytes were none."""
        if self._fault is not None:
            fault = self._fault
            raise ValueError(f"the large value does not decode ({type(fault).__name__}: {fault})")
        if not self._done or self._unpacker.tell() != self._size:
            raise ValueError("the large value's encoding does not fill its field")
        return Unpacked(self._value, self._size)


class _Opened:
    """A sealed value (:mod:`stepstone.records.payloads`) opened as its
    bytes are read, and its plain bytes decoded as they come (a ``bytes``
    value's gathered into its own allocation), so neither the sealed value
    nor its plain encoding is ever whole beside the value.

    A value this process lacks the codec or the key for is kept sealed, as
    its bytes (the sealed value's size, once): the record reads, and
    whoever opens the value says which key it lacks. (The bytes read
    before the first chunk opens are kept until it does, for that.)"""

    def __init__(self, size: int, payloads: Payloads) -> None:
        self._opening = Opening(size, payloads, into=self._plain)
        self._decoding: _Unpacking | None = None
        self._bytes: Allocation | None = None
        self._at = 0
        self._skip = 0
        self._sealed: bytearray | None = bytearray()
        """The bytes read until a chunk opened; all of them once the value
        is known not to open here for want of a key or a codec."""

    @property
    def fed(self) -> int:
        return self._opening.fed

    def __call__(self, view: memoryview) -> None:
        if self._sealed is not None:
            self._sealed += view
        self._opening(view)  # (past a fault it only counts the bytes)
        if self._sealed is not None and self._opening.opened_any:
            self._sealed = None  # (it opens here: nothing to keep)

    def _kept_sealed(self) -> bool:
        fault = self._opening.fault
        return (
            self._sealed is not None
            and isinstance(fault, PayloadUnreadable)
            and fault.missing
            and self._decoding is None
            and self._bytes is None
        )

    def _plain(self, view: memoryview) -> None:
        if self._decoding is None and self._bytes is None:
            size = self._opening.plain_size
            found = _bin_at(bytes(view[:5]), 0)
            if found is not None and sum(found) == size:  # a bytes value: no decoding
                self._bytes, self._skip = Allocation(found[0]), found[1]
            else:
                self._decoding = _Unpacking(size)
        if self._decoding is not None:
            self._decoding(view)
            return
        assert self._bytes is not None
        skipped = min(self._skip, len(view))
        self._skip -= skipped
        part = view[skipped:]
        self._bytes.view[self._at : self._at + len(part)] = part
        self._at += len(part)

    def unpacked(self) -> Stored:
        """The value; its sealed bytes when this process lacks the key or the
        codec to open it; ValueError, as for any large value, when it does
        not open with them (damaged, altered, no sealed payload at all) or
        what it opens to does not decode."""
        if self._kept_sealed():
            assert self._sealed is not None
            return bytes(self._sealed)
        try:
            self._opening.check()
        except BaseException as exc:
            if self._bytes is not None:
                self._bytes.drop()
            if isinstance(exc, PayloadUnreadable):
                raise ValueError(f"the large value does not decode: {exc}") from exc
            raise
        if self._bytes is not None:
            return Unpacked(self._bytes.taken(), self._opening.plain_size)
        assert self._decoding is not None
        return self._decoding.unpacked()


class LargeField:
    """A splitter (``stepstone.store.parts.Splitter``) that finds the ``bin``
    field ``name`` of a record's top-level map in its first bytes, and inside
    it the ``bin`` of a ``bytes`` value's encoding if that is what it holds;
    any other value it decodes as the store reads it (``Split.into``); a
    sealed one it opens (with ``payloads``) and decodes as it is read. It
    keeps what :func:`rejoined` needs to put the record back together."""

    def __init__(self, name: str, payloads: Payloads | None = None) -> None:
        self.name = name
        self.payloads = payloads if payloads is not None else Payloads()
        self.field_at = -1
        """Where the field's value (its ``bin`` header) starts in the record."""
        self.inner = b""
        """The header of the ``bin`` found inside the field (empty: none)."""
        self.unpacking: _Unpacking | _Opened | None = None
        """What decodes the field's value as it is read (None: it is read whole)."""

    def __call__(self, look: bytes) -> Split | None:
        self.field_at, self.inner, self.unpacking = -1, b"", None
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        unpacker.feed(look)
        try:
            for _ in range(unpacker.read_map_header()):
                key = unpacker.unpack()
                at = unpacker.tell()
                if key != self.name:
                    unpacker.skip()
                    continue
                found = _bin_at(look, at)
                if found is None or found[0] < SEPARATE:
                    return None
                length, header = found
                start = at + header
                self.field_at = at
                if start < len(look) and look[start] == MARK:
                    self.unpacking = _Opened(length, self.payloads)
                    return Split(start, length, into=self.unpacking)
                inner = _bin_at(look, start)
                if inner is not None and inner[0] + inner[1] == length:
                    self.inner = look[start : start + inner[1]]
                    return Split(start + inner[1], inner[0])
                self.unpacking = _Unpacking(length)
                return Split(start, length, into=self.unpacking)
        except (msgpack.OutOfData, msgpack.ExtraData, ValueError, TypeError):
            return None
        return None


def rejoined(found: SplitObject, field: LargeField) -> tuple[bytes, Stored | None]:
    """The record ``found`` holds as a small record (the large field emptied)
    and the field's value; or the whole record and None, when it was not
    split. ValueError when a value decoded as it was read does not decode."""
    if field.field_at < 0:
        return found.before, None
    small = found.before[: field.field_at] + EMPTY_BIN + found.after
    unpacking = field.unpacking
    if unpacking is not None and found.piece:  # (a store that read the piece whole)
        feed(unpacking, found.piece)
    if unpacking is not None and unpacking.fed:
        return small, unpacking.unpacked()
    if not found.piece:
        return found.before, None  # (the store found the split past the object's end)
    value: Body = Parts([field.inner, found.piece]) if field.inner else found.piece
    return small, value


async def write(
    store: ObjectStore,
    key: str,
    body: Body,
    *,
    if_absent: bool = False,
    if_match: str | None = None,
) -> str:
    """Write ``body`` as ``put``, ``put_if_absent`` or ``put_if_match`` would,
    a body of parts with ``put_parts``."""
    if isinstance(body, Parts):
        return await store.put_parts(key, body, if_absent=if_absent, if_match=if_match)
    if if_absent:
        return await store.put_if_absent(key, body)
    if if_match is not None:
        return await store.put_if_match(key, body, if_match)
    return await store.put(key, body)
