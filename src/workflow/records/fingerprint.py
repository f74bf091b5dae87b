"""A step's arguments' fingerprint: whether a replay passes what was recorded.

A step's memo keeps a short digest of the arguments it was first called
with, so a replay that calls it with other ones is seen (``stepstone show``,
the web view and the worker's log say so) instead of passing unnoticed.

The digest is of the arguments' values as data: MessagePack for what it
holds natively, a pydantic model's or a dataclass's fields, a datetime's
ISO form, an enum's value, a set's members in sorted order (a set of
strings iterates in another order in every process). An object it cannot
see into counts by its type's name only, never by its ``repr`` (which
often holds a memory address, different in every process): a changed
argument of such a type is not seen, and an unchanged one is never
reported as changed.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import hashlib
import uuid
from collections.abc import Mapping
from decimal import Decimal
from pathlib import PurePath
from typing import Any

import msgpack
from pydantic import BaseModel

LENGTH = 16
"""Hex characters kept of the digest (64 bits: a changed argument goes
unseen once in 2**64)."""


def of(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    """The fingerprint of a call's positional and keyword arguments."""
    packer = msgpack.Packer(use_bin_type=True, default=_as_data, strict_types=False)
    digest = hashlib.sha256()
    try:
        digest.update(packer.pack([list(args), sorted(kwargs.items())]))
    except (TypeError, ValueError, OverflowError):
        # (a value that will not pack, however it is taken apart: an int past
        # 64 bits inside a container; count the arguments by their types)
        digest.update(repr([_type_name(a) for a in args]).encode())
        digest.update(repr(sorted((k, _type_name(v)) for k, v in kwargs.items())).encode())
    return digest.hexdigest()[:LENGTH]


def _as_data(value: Any) -> Any:
    """What MessagePack packs for a value it does not know."""
    if isinstance(value, BaseModel):
        return [_type_name(value), value.model_dump(mode="json")]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [_type_name(value), dataclasses.asdict(value)]
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return ["timedelta", value.total_seconds()]
    if isinstance(value, enum.Enum):
        return [_type_name(value), value.value]
    if isinstance(value, set | frozenset):
        return sorted((_sortable(member) for member in value), key=repr)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Decimal | uuid.UUID | PurePath):
        return str(value)
    if isinstance(value, int):  # (past 64 bits)
        return ["int", str(value)]
    return ["object", _type_name(value)]


def _sortable(member: Any) -> Any:
    return _as_data(member) if not isinstance(member, str | bytes | int | float) else member


def _type_name(value: Any) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"
