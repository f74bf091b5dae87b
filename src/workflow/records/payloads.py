"""Payloads sealed by a codec as they are written, and opened as they are read.

A **payload** is the encoding of a value a user handed the engine: a job's
input, a step's result, an event, a stream's item, a callback's value, a
run's result, its progress (not its errors' messages: they stay plain). Each is
made in one place (:class:`stepstone.records.codec.ResultCodec`, or the
input's canonical JSON) and, before it is stored, goes through
:meth:`Payloads.seal`; every reader opens it with :meth:`Payloads.open`
before it decodes it. What the engine needs to run (the records' other
fields: status, times, keys, positions, leases) is never sealed.

A :class:`PayloadCodec` turns bytes into bytes and back (compression,
encryption; a user's own). A sealed payload is framed so that any reader
can tell it from a plain one and say what sealed it without opening it::

    0xC1 | header (MessagePack: {"c": [[codec, key id], ...], "n": size}) |
    chunks: (4-byte length | the chunk as the codecs made it) ...

where each chunk, before the codecs, starts with its place: its number (4
bytes) and 1 for the last chunk, else 0.

0xC1 is the one byte MessagePack never uses and no JSON text starts with,
so a plain payload (written without a codec, or before one was set) is read
as it always was. The header names each codec in the order it was applied
and the key id each used (empty: none), and the plain payload's size. The
payload is cut into chunks of :data:`CHUNK` bytes, each run through the
codecs on its own: a large value is sealed as it is written and opened as
it is read, a chunk at a time, never whole twice (:class:`Opening`).
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import msgpack

from stepstone.errors import PayloadUnreadable
from stepstone.store.parts import Body, Buffer, Parts, Stream

MARK = 0xC1
"""The first byte of a sealed payload: never a MessagePack value's, nor JSON's."""
CHUNK = 1 << 20
"""How many bytes of a payload each chunk holds (the last one fewer)."""
_LENGTH = 4
"""The bytes of a chunk's length before it."""
_NONCE = 16
"""The bytes of the nonce each codec is given for each chunk."""
_PLACE = 5
"""The bytes of a chunk's place (its number, and 1 for the last) sealed before its bytes."""
_HEADER_LONGEST = 4096
"""The most a frame's header takes."""
SEALED_EXT = 83
"""The MessagePack extension type of a sealed value kept inside a record
beside fields that stay plain (a run's progress): its data is the sealed
payload of the value's MessagePack encoding. A reader that knows nothing
of it decodes it as an ``ExtType``, and fails on nothing."""


@runtime_checkable
class PayloadCodec(Protocol):
    """What transforms payloads as they are stored and undoes it as they are
    read: compression, encryption, or one of your own.

    ``encode`` takes a payload's bytes (at most :data:`CHUNK` at a time: a
    large payload is handed over in chunks) and returns what is stored;
    ``decode`` undoes it, given the ``key_id`` that ``encode`` used (as
    :attr:`key_id` said then). Both are called from the event loop and from
    worker threads, so they must not block on I/O: fetch keys before.

    ``encode`` must give the same bytes for the same ``data`` and
    ``nonce``: a large payload is sealed as it is written, and a write that
    starts over (a retry, a checksum read before the send) seals it again.
    So an encrypting codec takes its IV from ``nonce`` (16 bytes, drawn at
    random for each payload written and derived for each chunk of it), not
    from a random source of its own; a compressor ignores it.

    ``decode`` raises :class:`stepstone.PayloadUnreadable` (with
    ``key_id`` set and ``missing=True``) when it does not hold the key, and any error when the
    bytes are not its own or were altered; the engine turns those into
    ``PayloadUnreadable`` naming the record.
    """

    @property
    def name(self) -> str:
        """The codec's name, recorded in every payload it sealed, and how a
        reader finds the codec to open it (``"zstd"``, ``"aes-gcm"``)."""
        ...

    @property
    def key_id(self) -> str:
        """The id of the key ``encode`` uses now, recorded beside the payload
        (``""`` for a codec without keys)."""
        ...

    def encode(self, data: bytes, nonce: bytes) -> bytes:
        """``data`` as it is to be stored; the same again for the same
        ``data`` and ``nonce``."""
        ...

    def decode(self, data: bytes, key_id: str) -> bytes:
        """What ``encode`` was given, from what it returned under ``key_id``."""
        ...


ROOM = 4096
"""How many bytes sealing adds to a payload of one chunk, at most, with the
built-in codecs (a frame's header, a chunk's length, a nonce and a tag)."""


def sealed(data: Buffer | Parts) -> bool:
    """Whether ``data`` is a sealed payload (a plain one never starts so)."""
    if isinstance(data, Parts):
        first = data.buffers[0] if data.buffers else b""
        return not isinstance(first, Stream) and bool(first) and first[0] == MARK
    return bool(data) and data[0] == MARK


def _header(data: bytes) -> tuple[list[tuple[str, str]], int, int]:
    """A frame's header: its codecs (name, key id) in the order applied, the
    plain payload's size, and where its chunks start. PayloadUnreadable
    when it is no such header."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=_HEADER_LONGEST)
    unpacker.feed(data[1:_HEADER_LONGEST])
    try:
        raw = unpacker.unpack()
    except Exception:
        raise PayloadUnreadable("a sealed payload's header does not decode") from None
    layers, size = (raw.get("c"), raw.get("n")) if isinstance(raw, dict) else (None, None)
    if (
        not isinstance(layers, list)
        or not layers
        or not all(
            isinstance(layer, list)
            and len(layer) == 2
            and all(isinstance(part, str) for part in layer)
            for layer in layers
        )
        or type(size) is not int
        or size < 0
    ):
        raise PayloadUnreadable("a sealed payload's header is not one stepstone writes")
    return [(name, key) for name, key in layers], size, 1 + unpacker.tell()


def describe(layers: Sequence[tuple[str, str]]) -> str:
    """What sealed a payload, in words: ``encrypted (key k2)``, ``compressed
    (zstd)``, ``encoded by mine (key a)``, outermost first."""
    words = []
    for name, key in reversed(layers):
        if name == "aes-gcm":
            words.append(f"encrypted (key {key})" if key else "encrypted")
        elif name in ("zstd", "zlib"):
            words.append(f"compressed ({name})")
        else:
            words.append(f"encoded by {name}" + (f" (key {key})" if key else ""))
    return ", ".join(words)


def sealed_by(data: Any) -> str:
    """What sealed payload ``data`` (or a value :meth:`Payloads.seal_value`
    sealed), in words (:func:`describe`); "" for a plain one."""
    if isinstance(data, msgpack.ExtType) and data.code == SEALED_EXT:
        data = data.data
    if not isinstance(data, bytes) or not sealed(data):
        return ""
    try:
        layers, _, _ = _header(data)
    except PayloadUnreadable:
        return "sealed (its header does not decode)"
    return describe(layers)


class Payloads:
    """A process's codecs, in the order they are applied (compression before
    encryption): what seals each payload it writes and opens each it reads.
    Without codecs it writes payloads plain and opens none that is sealed
    (PayloadUnreadable, saying what sealed it)."""

    def __init__(self, codecs: Iterable[PayloadCodec] = ()) -> None:
        self.codecs: tuple[PayloadCodec, ...] = ()
        self._by_name: dict[str, PayloadCodec] = {}
        self.use(codecs)

    def use(self, codecs: Iterable[PayloadCodec]) -> None:
        """Seal and open with ``codecs`` from now on (every part that holds
        this object sees the change)."""
        found = tuple(codecs)
        by_name = {codec.name: codec for codec in found}
        if len(by_name) != len(found):
            raise ValueError("two payload codecs share a name")
        self.codecs, self._by_name = found, by_name

    def __bool__(self) -> bool:
        return bool(self.codecs)

    # -- sealing

    def seal(self, body: Body) -> Body:
        """``body`` sealed (itself without codecs). A large body is sealed as
        it is written, a chunk at a time (counted first: a record holds its
        size before it)."""
        if not self.codecs:
            return body
        if isinstance(body, bytes):
            return self._sealed_whole(body)
        size = len(body)
        head = self._frame_head(size)
        seed = os.urandom(_NONCE)
        length = sum(map(len, self._sealed_chunks(body, seed)))
        return Parts([head, Stream(length, lambda: self._sealed_chunks(body, seed))])

    def seal_bytes(self, data: bytes) -> bytes:
        """``data`` sealed, as one ``bytes`` (a small payload's)."""
        return self._sealed_whole(data) if self.codecs else data

    def _sealed_whole(self, data: bytes) -> bytes:
        out = bytearray(self._frame_head(len(data)))
        for chunk in self._sealed_chunks(data, os.urandom(_NONCE)):
            out += chunk
        return bytes(out)

    def _frame_head(self, size: int) -> bytes:
        layers = [[codec.name, codec.key_id] for codec in self.codecs]
        head: bytes = msgpack.packb({"c": layers, "n": size})
        return bytes([MARK]) + head

    def _sealed_chunks(self, body: Body, seed: bytes) -> Iterator[bytes]:
        """``body``'s sealed chunks: the same bytes each time for one ``seed``."""
        for place, chunk in _placed(_chunks(body)):
            chunk = place + chunk
            for layer, codec in enumerate(self.codecs):
                nonce = hashlib.blake2b(seed + place + bytes([layer]), digest_size=_NONCE)
                chunk = codec.encode(chunk, nonce.digest())
            yield len(chunk).to_bytes(_LENGTH, "big")
            yield chunk

    def seal_value(self, value: Any) -> Any:
        """``value`` as a record field holds it: sealed, as a :data:`SEALED_EXT`
        extension (itself without codecs, and None as it is)."""
        if not self.codecs or value is None:
            return value
        plain: bytes = msgpack.packb(value, use_bin_type=True)
        return msgpack.ExtType(SEALED_EXT, self.seal_bytes(plain))

    def open_value(self, value: Any) -> Any:
        """The value a field sealed by :meth:`seal_value` holds (a plain one as
        it is); PayloadUnreadable when it does not open here."""
        if not isinstance(value, msgpack.ExtType) or value.code != SEALED_EXT:
            return value
        return msgpack.unpackb(self.open_bytes(value.data), raw=False, strict_map_key=False)

    # -- opening

    @staticmethod
    def plain_size(data: bytes) -> int:
        """The size of the plain payload ``data`` holds, without opening it."""
        return _header(data)[1] if sealed(data) else len(data)

    def open_bytes(self, data: bytes) -> bytes:
        """The plain payload ``data`` holds (``data`` itself when it is plain).
        PayloadUnreadable, saying what sealed it and why it cannot be opened
        here, when it cannot."""
        if not sealed(data):
            return data
        opening = Opening(len(data), self)
        opening(memoryview(data))
        return opening.plain()

    def open(self, stored: Any) -> Any:
        """``open_bytes`` for any stored form: bytes, Parts (joined, rare: a
        large value is opened as it is read), or a value already decoded."""
        if isinstance(stored, bytes):
            return self.open_bytes(stored)
        if isinstance(stored, Parts) and sealed(stored):
            return self.open_bytes(stored.join())
        return stored

    def opener(self, layers: Sequence[tuple[str, str]]) -> list[PayloadCodec]:
        """The codecs that open a payload sealed by ``layers``, in the order
        to apply them. PayloadUnreadable naming the first one missing."""
        codecs = []
        for name, key in reversed(layers):
            codec = self._by_name.get(name)
            if codec is None:
                raise PayloadUnreadable(
                    f"the payload is {describe(layers)}; this process has no {name!r} codec"
                    + (f" (nor key {key!r})" if key else ""),
                    key_id=key,
                    sealed_by=describe(layers),
                    missing=True,
                )
            codecs.append(codec)
        return codecs


def unreadable(exc: PayloadUnreadable, what: str) -> PayloadUnreadable:
    """``exc`` again, its message saying first ``what`` could not be opened."""
    return PayloadUnreadable(
        f"{what}: {exc}", key_id=exc.key_id, sealed_by=exc.sealed_by, missing=exc.missing
    )


def _placed(chunks: Iterator[bytes]) -> Iterator[tuple[bytes, bytes]]:
    """Each chunk with its place, sealed with it: its number and whether it
    is the last (:data:`_PLACE` bytes), so that chunks reordered, dropped
    or cut off at the end do not open (an encrypting codec authenticates
    them with the chunk)."""
    number = 0
    ahead = next(chunks, None)
    while ahead is not None:
        chunk, ahead = ahead, next(chunks, None)
        yield number.to_bytes(4, "big") + (b"\x00" if ahead is not None else b"\x01"), chunk
        number += 1


def _chunks(body: Body) -> Iterator[bytes]:
    """``body``'s bytes in chunks of ``CHUNK`` (the last one shorter; one
    empty chunk for an empty body)."""
    if isinstance(body, bytes):
        if not body:
            yield b""
        view = memoryview(body)
        for at in range(0, len(view), CHUNK):
            yield bytes(view[at : at + CHUNK])
        return
    gathered = bytearray()
    made = False
    for buffer in body.chunks():
        view = memoryview(buffer)
        while view:
            room = CHUNK - len(gathered)
            gathered += view[:room]
            view = view[room:]
            if len(gathered) == CHUNK:
                made = True
                yield bytes(gathered)
                gathered = bytearray()
    if gathered or not made:
        yield bytes(gathered)


class Opening:
    """A sealed payload of ``size`` bytes opened as its bytes come in (a
    ``Sink``): its header read, then each chunk, once whole, opened and its
    plain bytes handed on, so neither the sealed payload nor its chunks are
    ever held whole. The plain bytes go to ``into`` when given (a decoder
    fed as they come), else into one allocation of the plain size
    (:meth:`plain`). A fault is kept, not raised (it would be taken for the
    store's), and the rest of the bytes passed over."""

    def __init__(self, size: int, payloads: Payloads, into: Any = None) -> None:
        self._size = size
        self._payloads = payloads
        self._into = into
        self.fed = 0
        """How many bytes it was handed."""
        self._pending = bytearray()
        self._codecs: list[PayloadCodec] | None = None
        self._layers: list[tuple[str, str]] = []
        self.plain_size = 0
        """The plain payload's size (once the header is read)."""
        self._plain = io.BytesIO()
        self._opened = 0
        self._chunks = 0
        self._ended = False
        self.fault: Exception | None = None

    def __call__(self, view: memoryview) -> None:
        self.fed += len(view)
        if self.fault is not None:
            return
        try:
            self._pending += view
            self._consume()
        except Exception as exc:
            self.fault = exc
            self._pending = bytearray()

    def _consume(self) -> None:
        if self._codecs is None:
            if len(self._pending) < min(self._size, _HEADER_LONGEST):
                return
            self._layers, self.plain_size, start = _header(bytes(self._pending))
            self._codecs = self._payloads.opener(self._layers)
            del self._pending[:start]
        while len(self._pending) >= _LENGTH:
            length = int.from_bytes(self._pending[:_LENGTH], "big")
            if len(self._pending) < _LENGTH + length:
                return
            chunk = bytes(self._pending[_LENGTH : _LENGTH + length])
            del self._pending[: _LENGTH + length]
            for codec, (_, key) in zip(self._codecs, reversed(self._layers), strict=True):
                try:
                    chunk = codec.decode(chunk, key)
                except PayloadUnreadable as exc:
                    raise PayloadUnreadable(
                        f"the payload is {describe(self._layers)}: {exc}",
                        key_id=exc.key_id or key,
                        sealed_by=describe(self._layers),
                        missing=exc.missing,
                    ) from None
                except Exception as exc:
                    raise PayloadUnreadable(
                        f"the payload is {describe(self._layers)} and does not open: "
                        f"{codec.name} says {type(exc).__name__}"
                        + (f": {exc}" if str(exc) else "")
                        + " (damaged, altered, or sealed under another key of that id)",
                        key_id=key,
                        sealed_by=describe(self._layers),
                    ) from None
            place = (self._chunks).to_bytes(4, "big")
            if len(chunk) < _PLACE or chunk[:4] != place or self._ended:
                raise PayloadUnreadable(
                    f"the payload is {describe(self._layers)} and its chunks are out of order"
                )
            self._chunks += 1
            self._ended = chunk[4] == 1
            chunk = chunk[_PLACE:]
            self._opened += len(chunk)
            if self._opened > self.plain_size:
                raise PayloadUnreadable("a sealed payload opens to more bytes than it says")
            if self._into is not None:
                self._into(memoryview(chunk))
            else:
                self._plain.write(chunk)

    @property
    def opened_any(self) -> bool:
        """Whether a chunk has opened (the key and the codecs are held)."""
        return self._chunks > 0

    def check(self) -> None:
        """Raise the fault, or PayloadUnreadable when the bytes did not make
        the whole payload."""
        if self.fault is not None:
            raise self.fault
        if self._codecs is None and self.fed == self._size:
            self._consume()
        whole = self._ended and not self._pending and self._opened == self.plain_size
        if self._codecs is None or not whole:
            raise PayloadUnreadable("a sealed payload is cut short or has bytes past its end")

    def plain(self) -> bytes:
        """The plain payload (without ``into``); raises as :meth:`check`."""
        self.check()
        return self._plain.getvalue()
