"""Password hashes for the web view's sign-in: scrypt, from the standard library.

A hash is kept as one PHC-style string that names its parameters,
``$scrypt$ln=14,r=8,p=5$<salt>$<key>`` (salt and key in unpadded base64),
so the parameters can be raised later and old hashes still check. The
defaults are one of OWASP's recommended scrypt settings (N=2^14, r=8, p=5:
16 MiB of memory; about a third of a second on a busy 2-core machine).

A password is checked by deriving its key with the hash's own parameters
and comparing the two keys in constant time (:func:`hmac.compare_digest`);
no password, plain or hashed, is ever compared as text. Uses only
:mod:`hashlib`, so the CLI can make hashes without the ``ui`` extra.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets

LOG2_N = 14
"""log2 of scrypt's cost N for new hashes."""
BLOCK_SIZE = 8
PARALLELISM = 5
KEY_BYTES = 32
SALT_BYTES = 16
SHORTEST = 8
"""Characters a new password has at least."""
MAX_MEMORY = 256 << 20
"""Bytes of memory the costliest hash checked takes (128 * r * N): a hash
asking for more is refused, not run, so no line of a users file can make
each sign-in take gigabytes."""

_HASH = re.compile(
    r"\$scrypt\$ln=(\d{1,2}),r=(\d{1,2}),p=(\d{1,2})\$([A-Za-z0-9+/]+)\$([A-Za-z0-9+/]+)"
)


class BadHash(ValueError):
    """A stored hash that is not one :func:`hash_password` could have made."""


def check_password(password: str) -> str:
    """``password`` if it will do for a new one; raises ValueError saying why not."""
    if len(password) < SHORTEST:
        raise ValueError(f"a password has at least {SHORTEST} characters")
    return password


def hash_password(password: str, *, log2_n: int = LOG2_N) -> str:
    """A new hash of ``password`` with a fresh random salt."""
    check_password(password)
    salt = secrets.token_bytes(SALT_BYTES)
    key = _derive(password, salt, log2_n, BLOCK_SIZE, PARALLELISM, KEY_BYTES)
    params = f"ln={log2_n},r={BLOCK_SIZE},p={PARALLELISM}"
    return f"$scrypt${params}${_b64(salt)}${_b64(key)}"


def check_hash(hashed: str) -> str:
    """``hashed`` if it is a hash this module can check; raises BadHash saying why."""
    _parse(hashed)
    return hashed


def verify_password(password: str, hashed: str) -> bool:
    """Whether ``password`` is the one ``hashed`` was made from (keys compared
    in constant time). Raises BadHash for a hash that is none."""
    log2_n, r, p, salt, key = _parse(hashed)
    tried = _derive(password, salt, log2_n, r, p, len(key))
    return hmac.compare_digest(tried, key)


_DECOY: list[str] = []


def decoy_hash() -> str:
    """A hash no password is known for, checked in place of an unknown
    user's so that a wrong name takes as long to refuse as a wrong password."""
    if not _DECOY:
        _DECOY.append(hash_password(secrets.token_urlsafe(24)))
    return _DECOY[0]


def _parse(hashed: str) -> tuple[int, int, int, bytes, bytes]:
    found = _HASH.fullmatch(hashed.strip())
    if found is None:
        raise BadHash("not a password hash of the form $scrypt$ln=N,r=R,p=P$SALT$KEY")
    log2_n, r, p = (int(found.group(i)) for i in (1, 2, 3))
    if not (10 <= log2_n <= 24 and 1 <= r <= 32 and 1 <= p <= 16) or (
        128 * r << log2_n > MAX_MEMORY
    ):
        raise BadHash(f"scrypt parameters out of range: ln={log2_n}, r={r}, p={p}")
    salt, key = _unb64(found.group(4)), _unb64(found.group(5))
    if len(salt) < 8 or not 16 <= len(key) <= 64:
        raise BadHash("the salt or the key has not the length of a hash's")
    return log2_n, r, p, salt, key


def _derive(password: str, salt: bytes, log2_n: int, r: int, p: int, length: int) -> bytes:
    n = 1 << log2_n
    return hashlib.scrypt(
        password.encode(), salt=salt, n=n, r=r, p=p, maxmem=256 * r * n + (1 << 20), dklen=length
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except ValueError as exc:
        raise BadHash(f"not base64: {exc}") from None
