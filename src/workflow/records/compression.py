"""Built-in payload codecs that compress: zstd (the ``zstandard`` package,
``pip install 'stepstone[zstd]'``) and zlib (the standard library).

Each chunk of a payload (:mod:`stepstone.records.payloads`) is compressed
on its own, and kept as it was where compressing would not make it
smaller (a short result, bytes already compressed): the first byte says
which. Figures (size and CPU per MB on JSON-like payloads) are in
docs/security.md.
"""

from __future__ import annotations

import abc
import zlib
from typing import Any

_STORED = b"\x00"
_PACKED = b"\x01"


class _Compressing(abc.ABC):
    """What both compressors share: a chunk kept as it is where compressing
    does not pay, and told apart by its first byte."""

    name = ""
    key_id = ""
    """No key: a compressor records none."""

    @abc.abstractmethod
    def _compress(self, data: bytes) -> bytes:
        """``data`` compressed by this codec's algorithm."""

    @abc.abstractmethod
    def _decompress(self, data: bytes, size: int) -> bytes:
        """``data`` decompressed, ``size`` bytes long."""

    def encode(self, data: bytes, nonce: bytes = b"") -> bytes:
        """``data`` compressed, or as it is when that would not be smaller
        (``nonce``: not needed)."""
        packed = self._compress(data)
        if len(packed) + 4 >= len(data):
            return _STORED + data
        return _PACKED + len(data).to_bytes(4, "big") + packed

    def decode(self, data: bytes, key_id: str) -> bytes:
        """What :meth:`encode` was given. ValueError for bytes it did not make."""
        kind = data[:1]
        if kind == _STORED:
            return data[1:]
        if kind != _PACKED or len(data) < 5:
            raise ValueError(f"not a chunk {self.name} made")
        size = int.from_bytes(data[1:5], "big")
        plain = self._decompress(data[5:], size)
        if len(plain) != size:
            raise ValueError(f"{self.name} made {len(plain)} bytes where {size} were recorded")
        return plain


class ZlibCodec(_Compressing):
    """Compression with the standard library's zlib: no dependency; slower
    than zstd for the same size (docs/security.md has both measured).
    ``level``: 1 (fast) to 9 (small), 6 by default."""

    name = "zlib"

    def __init__(self, level: int = 6) -> None:
        if not 0 <= level <= 9:
            raise ValueError(f"a zlib level is 0 to 9, not {level}")
        self.level = level

    def _compress(self, data: bytes) -> bytes:
        return zlib.compress(data, self.level)

    def _decompress(self, data: bytes, size: int) -> bytes:
        decompressor = zlib.decompressobj()
        plain = decompressor.decompress(data, size + 1)
        if not decompressor.eof:
            raise ValueError("the zlib stream is cut short or longer than recorded")
        return plain


class ZstdCodec(_Compressing):
    """Compression with zstd, through the ``zstandard`` package (``pip
    install 'stepstone[zstd]'``). ``level``: 1 to 22, 3 by default (zstd's
    own default: most of the size for little CPU)."""

    name = "zstd"

    def __init__(self, level: int = 3) -> None:
        try:
            import zstandard
        except ImportError:
            raise ImportError(
                "ZstdCodec needs the zstandard package: pip install 'stepstone[zstd]'"
            ) from None
        self.level = level
        self._zstd: Any = zstandard
        self._compressor = zstandard.ZstdCompressor(level=level)
        self._decompressor = zstandard.ZstdDecompressor()

    def _compress(self, data: bytes) -> bytes:
        packed: bytes = self._compressor.compress(data)
        return packed

    def _decompress(self, data: bytes, size: int) -> bytes:
        try:
            plain: bytes = self._decompressor.decompress(data, max_output_size=size)
            return plain
        except self._zstd.ZstdError as exc:
            raise ValueError(f"zstd: {exc}") from None
