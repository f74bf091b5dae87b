"""A value's MessagePack encoding made a piece at a time, as it is written.

A step or job result that is a pydantic model holding a large ``str`` or
list is dumped to plain values and packed. Packed whole, its encoding is in
memory beside the value, as large as the value's bytes again. So a value
that may be large is encoded by :func:`pieces`: the same bytes as
``msgpack.packb`` (readers cannot tell), made in pieces of at most about
:data:`PIECE` bytes. A large ``str`` goes out in slices encoded one at a
time; a list or map goes out in runs of its items, each run packed at once
(at C speed) once :func:`fits` has found, without packing it, that it
takes at most a piece; an item too large for a run is cut the same way.

A record holding the value needs the encoding's size before the encoding
(its ``bin`` header, and S3's Content-Length), so the pieces are made once
to count them and again as they are written (:class:`EncodedValue`, a
``Stream`` that remembers the value, so that what a replay would decode
can be given back without decoding: :func:`as_decoded`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Generator, Iterator, Sequence
from itertools import chain, islice
from typing import Any

import msgpack

from stepstone.store.parts import Buffer, Stream

PIECE = 1 << 20
"""About the most one piece holds (a few header bytes more at most)."""

_FIXED = frozenset({int, float, bool, type(None)})
"""Types whose values take at most ``_WIDEST`` bytes encoded."""
_WIDEST = 9
"""The most a fixed-size value, or the header of a str, bin, array or map, takes."""
_ATOMS = _FIXED | {str, bytes}
"""Types whose values decode as equal values of the same type."""
_NATIVE = (type(None), bool, int, float, str, bytes)
"""What msgpack stores as it is, subclasses included (an IntEnum as an int)."""


def native_bound(value: object) -> int:
    """A size ``value``'s MessagePack encoding does not pass, when msgpack
    stores the value as it is (tuples come back as lists); -1 when it does
    not. One walk tells both, so a result known to be small is packed whole
    as it always was."""
    if isinstance(value, str):
        return _WIDEST + len(value) * (1 if value.isascii() else 4)
    if isinstance(value, bytes):
        return _WIDEST + len(value)
    if isinstance(value, _NATIVE):
        return _WIDEST if not isinstance(value, int) or -(2**63) <= value < 2**64 else -1
    total = _WIDEST
    if isinstance(value, list | tuple):
        for item in value:
            size = native_bound(item)
            if size < 0:
                return -1
            total += size
        return total
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str | int):
                return -1
            size, key_size = native_bound(item), native_bound(key)
            if size < 0 or key_size < 0:
                return -1
            total += size + key_size
        return total
    return -1


def fits(items: Sequence[object], limit: int) -> bool:
    """Whether ``items``, packed one after another, surely take at most
    ``limit`` bytes. Counted without packing, a level of nesting at a time,
    each level at C speed (a set of its types, sums of its lengths), and
    never gathering more than ``limit`` items of a level; False where it
    cannot tell (a type of no plain kind, which only packing can judge)."""
    total = 0
    level: Sequence[object] = items
    while level:
        total += _WIDEST * len(level)
        if total > limit:
            return False
        kinds = set(map(type, level))
        below: list[object] = []
        for kind in kinds:
            if kind in _FIXED:
                continue
            same: Sequence[Any] = (
                level if len(kinds) == 1 else [x for x in level if type(x) is kind]
            )
            if kind is str:
                total += sum(map(len, same)) * (1 if all(map(str.isascii, same)) else 4)
            elif kind is bytes:
                total += sum(map(len, same))
            elif kind is dict or kind is list or kind is tuple:
                count = sum(map(len, same)) * (2 if kind is dict else 1)
                if total + _WIDEST * count > limit:  # (what the next level adds first)
                    return False
                below.extend(chain.from_iterable(same))
                if kind is dict:
                    below.extend(chain.from_iterable(map(dict.values, same)))
            else:
                return False
            if total > limit:
                return False
        level = below
    return total <= limit


def pieces(value: object) -> Iterator[Buffer]:
    """``msgpack.packb(value, use_bin_type=True)``, byte for byte, in pieces
    of at most about :data:`PIECE` bytes (small ones gathered). Raises what
    ``packb`` raises, for the same values."""
    packer = msgpack.Packer(use_bin_type=True)
    gathered = bytearray()
    for piece in _pieces(value, packer):
        if len(piece) >= PIECE // 2:
            if gathered:
                yield bytes(gathered)
                gathered = bytearray()
            yield piece
            continue
        gathered += piece
        if len(gathered) >= PIECE // 2:
            yield bytes(gathered)
            gathered = bytearray()
    if gathered:
        yield bytes(gathered)


def encoded_size(value: object) -> int:
    """The size of ``value``'s encoding, its pieces made and let go."""
    return sum(map(len, pieces(value)))


class EncodedValue(Stream):
    """A value's encoding as a :class:`stepstone.store.parts.Stream`: made
    by :func:`pieces` each time it is read, ``value`` kept for
    :func:`as_decoded`. ``private``: nothing but this holds the value's
    lists and maps (a model's dump, made to be encoded), so what decodes
    as it is may be given back as it is."""

    __slots__ = ("private", "value")

    def __init__(self, value: object, size: int, *, private: bool = False) -> None:
        super().__init__(size, lambda: pieces(value))
        self.value = value
        self.private = private

    def decoded(self) -> Any:
        """What decoding the encoding gives (:func:`as_decoded`)."""
        return as_decoded(self.value, reuse=self.private)


def as_decoded(value: object, *, reuse: bool = False) -> Any:
    """What decoding ``value``'s encoding gives (``unpackb(packb(value))``),
    without encoding it: its strings and bytes the very same objects, its
    lists and maps made again (a tuple comes back a list), or, with
    ``reuse``, made again only where they would decode otherwise."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is list or kind is tuple:
        items: Sequence[Any] = value  # type: ignore[assignment]
        if set(map(type, items)) <= _ATOMS:
            return items if reuse and kind is list else list(items)
        made = [as_decoded(item, reuse=reuse) for item in items]
        same = reuse and kind is list and all(map(operator.is_, made, items))
        return items if same else made
    if kind is dict:
        entries: dict[Any, Any] = value  # type: ignore[assignment]
        if set(map(type, entries)) <= _ATOMS and set(map(type, entries.values())) <= _ATOMS:
            return entries if reuse else dict(entries)
        pairs = {as_decoded(k, reuse=reuse): as_decoded(v, reuse=reuse) for k, v in entries.items()}
        same = reuse and all(map(operator.is_, pairs.values(), entries.values()))
        return entries if same and all(map(operator.is_, pairs, entries)) else pairs
    # A subclass of a plain type: what MessagePack makes of it.
    return msgpack.unpackb(msgpack.packb(value, use_bin_type=True), raw=False, strict_map_key=False)


def _pieces(value: object, packer: msgpack.Packer) -> Iterator[Buffer]:
    if fits((value,), PIECE):
        yield packer.pack(value)
        return
    kind = type(value)
    if kind is str:
        yield from _text(value)  # type: ignore[arg-type]
    elif kind is bytes:
        data = memoryview(value)  # type: ignore[arg-type]
        yield sized_header(len(data), b"\xc4", b"\xc5", b"\xc6")
        for at in range(0, len(data), PIECE):
            yield data[at : at + PIECE]
    elif kind is list or kind is tuple:
        items: Sequence[object] = value  # type: ignore[assignment]
        yield packer.pack_array_header(len(items))
        yield from _runs(iter(items), packer, lambda run: run)
    elif kind is dict:
        entries: dict[object, object] = value  # type: ignore[assignment]
        yield packer.pack_map_header(len(entries))
        yield from _runs(iter(entries.items()), packer, lambda run: [*chain.from_iterable(run)])
    else:
        yield packer.pack(value)  # (a subclass of a plain type; or packb's own error)


def _text(text: str) -> Iterator[bytes]:
    """A large ``str``'s encoding: its header, then slices of it encoded one by one."""
    step = PIECE if text.isascii() else PIECE // 4
    size = (
        len(text)
        if text.isascii()
        else sum(len(text[at : at + step].encode()) for at in range(0, len(text), step))
    )
    fix = bytes([0xA0 | size]) if size < 32 else b""  # (a fixstr's size is in its type byte)
    yield sized_header(size, b"\xd9", b"\xda", b"\xdb", small=fix)
    for at in range(0, len(text), step):
        yield text[at : at + step].encode()


def sized_header(size: int, one: bytes, two: bytes, four: bytes, *, small: bytes = b"") -> bytes:
    """A str's or bin's header for ``size`` bytes: ``small`` where it fits
    the type byte, else ``one``, ``two`` or ``four`` and the size in as many
    bytes (``stepstone.records.large_values.bin_header`` is a bin's)."""
    if small:
        return small
    if size < 1 << 8:
        return one + size.to_bytes(1, "big")
    if size < 1 << 16:
        return two + size.to_bytes(2, "big")
    return four + size.to_bytes(4, "big")


Layout = Callable[[list[Any]], list[Any]]
"""How a run of items is laid out as the values it is packed as."""


def _runs(items: Iterator[Any], packer: msgpack.Packer, flat: Layout) -> Iterator[Buffer]:
    """The encodings of ``items`` (list items, or a map's key-value pairs,
    which ``flat`` lays out as the items they are packed as) one after
    another: in runs packed at once, a run as long as fits in a piece."""
    length = 64
    while run := list(islice(items, length)):
        whole = yield from _run(run, packer, flat)
        length = min(length * 2, 1 << 16) if whole else max(length // 2, 1)


def _run(run: list[Any], packer: msgpack.Packer, flat: Layout) -> Generator[Buffer, None, bool]:
    """One run: packed as an array whose header is cut off, if it fits in a
    piece; else its halves, or its one item cut into pieces. Returns
    whether it went whole."""
    laid = flat(run)
    if fits(laid, PIECE):
        packed = packer.pack(laid)
        yield memoryview(packed)[_array_header(len(laid)) :]
        return True
    if len(run) > 1:
        half = len(run) // 2
        yield from _run(run[:half], packer, flat)
        yield from _run(run[half:], packer, flat)
        return False
    for item in laid:
        yield from _pieces(item, packer)
    return False


def _array_header(count: int) -> int:
    """The length of an array's header for ``count`` items."""
    return 1 if count < 16 else 3 if count < 1 << 16 else 5
