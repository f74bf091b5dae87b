"""A built-in payload codec that encrypts: AES-256-GCM, from the
``cryptography`` package (``pip install 'stepstone[crypto]'``).

Keys are a list of ``(key id, key)``: the first encrypts, every one
decrypts, and each payload records the id of the key it was sealed under
(:mod:`stepstone.records.payloads`), so keys rotate without rewriting the
bucket: put the new key first, keep the old ones while runs sealed under
them live. Each chunk is sealed under a 96-bit IV drawn at random for each payload
(and derived for each of its chunks), its key id as associated data (a
chunk cannot pass for one under another id).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping
from typing import Any

from stepstone.errors import PayloadUnreadable

NONCE = 12
"""The bytes of a nonce, stored before each chunk's ciphertext."""
KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
"""What a key id may be: it is shown to operators and stored in every payload."""


class AesGcmCodec:
    """Authenticated encryption of payloads with AES-GCM under a list of keys.

    ``keys``: ``(key id, key)`` pairs (or a mapping, in its order), each
    key 32 bytes (AES-256; 16 and 24 are taken too) or their base64. The
    first key encrypts; all decrypt. A payload sealed under a key id not in
    the list raises :class:`stepstone.PayloadUnreadable` naming it."""

    name = "aes-gcm"

    def __init__(self, keys: Mapping[str, bytes | str] | Iterable[tuple[str, bytes | str]]) -> None:
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError:
            raise ImportError(
                "AesGcmCodec needs the cryptography package: pip install 'stepstone[crypto]'"
            ) from None
        pairs = list(keys.items()) if isinstance(keys, Mapping) else list(keys)
        if not pairs:
            raise ValueError("AesGcmCodec needs at least one key")
        self._ciphers: dict[str, Any] = {}
        for key_id, key in pairs:
            if not isinstance(key_id, str) or not KEY_ID.match(key_id):
                raise ValueError(
                    f"a key id is 1 to 64 letters, digits, '.', '_' or '-', not {key_id!r}"
                )
            if key_id in self._ciphers:
                raise ValueError(f"key id {key_id!r} is given twice")
            raw = _key_bytes(key_id, key)
            self._ciphers[key_id] = AESGCM(raw)
        self._key_id: str = pairs[0][0]

    @property
    def key_id(self) -> str:
        """The id of the key that encrypts (the first given)."""
        return self._key_id

    @property
    def key_ids(self) -> list[str]:
        """The ids of the keys it holds, the encrypting one first."""
        return list(self._ciphers)

    def encode(self, data: bytes, nonce: bytes) -> bytes:
        """``data`` encrypted under the first key with the first 12 bytes of
        ``nonce`` as its IV (drawn at random for each payload, derived for
        each chunk: :mod:`stepstone.records.payloads`): the IV, then the
        ciphertext and its tag."""
        if len(nonce) < NONCE:
            raise ValueError(f"a nonce of {NONCE} bytes at least is needed, not {len(nonce)}")
        nonce = nonce[:NONCE]
        sealed: bytes = self._ciphers[self._key_id].encrypt(nonce, data, self._key_id.encode())
        return nonce + sealed

    def decode(self, data: bytes, key_id: str) -> bytes:
        """``data`` decrypted under ``key_id``'s key. PayloadUnreadable when
        no key of that id is held; cryptography's InvalidTag when the bytes
        were altered (or sealed under another key given the same id)."""
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise PayloadUnreadable(
                f"key {key_id!r} is not held (this process holds {', '.join(self._ciphers)})",
                key_id=key_id,
                missing=True,
            )
        if len(data) < NONCE + 16:
            raise ValueError("shorter than a nonce and a tag")
        plain: bytes = cipher.decrypt(data[:NONCE], data[NONCE:], key_id.encode())
        return plain


def _key_bytes(key_id: str, key: bytes | str) -> bytes:
    """A key as bytes: given as bytes, or as base64 text."""
    raw: bytes
    if isinstance(key, str):
        try:
            raw = base64.b64decode(key.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"key {key_id!r} is not base64") from None
    else:
        raw = bytes(key)
    if len(raw) not in (16, 24, 32):
        raise ValueError(f"key {key_id!r} is {len(raw)} bytes; AES takes 32 (or 16 or 24)")
    return raw
