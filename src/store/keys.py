"""Key validation: the one gate every backend passes keys through.

Keys are built by the engine from hex digests and fixed words, but a user's
step name or a hand-typed CLI argument can end up in one; a FileStore maps
keys onto paths, so a key that could climb out of the root is refused here,
before any backend sees it.
"""

from __future__ import annotations

import re

from .errors import InvalidKey

MAX_KEY_LENGTH = 1024
"""S3's own limit on a key, in UTF-8 bytes; we apply it to every backend. (An
S3Store's own prefix counts against it: see ``ObjectStore.key_limit``.)"""

MAX_SEGMENT_LENGTH = 255
"""The longest segment (between slashes) of a key, in UTF-8 bytes: a
filesystem's ``NAME_MAX``; applied to every backend."""

RESERVED_SEGMENT = ".stepstone-tmp"
"""A first segment no key may use: the FileStore keeps its temp files and lock
files in a directory of this name under its root, so no key can name (or list)
them. Refused on every backend, so code that works on one works on all."""


def validate_key(key: str, *, location: str = "", limit: int = MAX_KEY_LENGTH) -> str:
    """Return ``key`` unchanged if it is safe on every backend, else raise
    InvalidKey; ``limit`` is the longest key the store takes, in UTF-8 bytes."""
    if not isinstance(key, str):
        raise InvalidKey(f"a key must be a str, not {type(key).__name__}", location=location)
    if not key:
        raise InvalidKey("a key must not be empty", location=location)
    problem = _problem(key, limit)
    if problem:
        raise InvalidKey(f"invalid key {key!r}: {problem}", location=location)
    return key


def validate_prefix(prefix: str, *, location: str = "") -> str:
    """A listing prefix: empty, or a key-like string (a trailing ``/`` allowed)."""
    if prefix == "":
        return prefix
    body = prefix[:-1] if prefix.endswith("/") else prefix
    problem = _problem(body) if body else "a prefix must not be '/'"
    if problem:
        raise InvalidKey(f"invalid prefix {prefix!r}: {problem}", location=location)
    return prefix


_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _problem(key: str, limit: int = MAX_KEY_LENGTH) -> str:
    length = len(key.encode("utf-8", "surrogatepass"))
    if length > limit:
        return f"longer than {limit} bytes"
    if key.startswith("/"):
        return "it must not start with '/'"
    if "\\" in key:
        return "it must not contain a backslash"
    if _CONTROL.search(key):
        return "it must not contain NUL or control characters"
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return "it must be valid UTF-8 (no lone surrogates)"
    segments = key.split("/")
    for segment in segments:
        if segment in ("", ".", ".."):
            return "it must not contain empty, '.' or '..' segments"
        if length > MAX_SEGMENT_LENGTH and len(segment.encode()) > MAX_SEGMENT_LENGTH:
            return f"a segment is longer than {MAX_SEGMENT_LENGTH} bytes"
    if segments[0] == RESERVED_SEGMENT:
        return f"the first segment {RESERVED_SEGMENT!r} is reserved for the store's own files"
    return ""


def join(*parts: str) -> str:
    """Join key parts with '/', dropping empty parts (so a blank prefix adds nothing)."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))
