"""Hostile values for well-formed records: what to write into each field.

The cases are made from a record as the engine wrote it: every field it
holds (and every field its record class declares, held or not), walked down
into maps, lists (every item of a short one, the first of a long one), and
bytes that hold a MessagePack or JSON record of their own (a memo's value,
a queue record's payload), each set in turn to each value of
:data:`HOSTILE`. A field added to a record is swept without a change here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from stepstone.records.codec import pack, unpack

HUGE_LIST = [0] * 100_000

HOSTILE: dict[str, Any] = {
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "1e20": 1e20,
    "min-int64": -(2**63),
    "max-uint64": 2**64 - 1,
    "huge-list": HUGE_LIST,
    "str": "x",
    "map": {"x": 1},
    "none": None,
    "bool": True,
    "bytes": b"\x00\xff",
}
"""Values a record decodes with that no run could have written, by name."""

Path = tuple[str | int, ...]
SHORT = 8
"""A list this long or shorter is walked item by item (a record's tuples:
a slot holder's run, token and lease end); a longer one by its first."""


@dataclass(frozen=True)
class Case:
    """One field of one record set to one hostile value."""

    kind: str
    path: Path
    value: str
    """A name in :data:`HOSTILE`."""

    @property
    def id(self) -> str:
        return f"{self.kind}:{'.'.join(str(p) for p in self.path)}={self.value}"


def cases(kind: str, record: bytes, declared: Iterable[str] = ()) -> list[Case]:
    """Every (field, hostile value) of ``record`` (MessagePack), plus the
    top-level fields ``declared`` by its record class that it does not hold.
    A value of the field's own kind (a string for a string) is no hostile
    value there, and is left out; numbers go everywhere."""
    root = unpack(record)
    fields = list(_paths(root))
    if isinstance(root, dict):
        fields += [(name,) for name in declared if name not in root]
    out = []
    for path in fields:
        current = _get(root, path)
        for name, value in HOSTILE.items():
            if _same_kind(current, value):
                continue
            out.append(Case(kind, path, name))
    return out


def spoiled(record: bytes, case: Case) -> bytes:
    """``record`` with the field ``case.path`` set to its hostile value."""
    return pack(_set(unpack(record), case.path, HOSTILE[case.value]))


def _same_kind(current: object, value: object) -> bool:
    plain = (str, bytes, dict, bool, type(None))
    return isinstance(value, plain) and type(current) is type(value)


def _paths(value: object, path: Path = ()) -> Iterator[Path]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*path, key)
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):  # a short one is a tuple: every item; else the first
        for index, item in enumerate(value if len(value) <= SHORT else value[:1]):
            yield (*path, index)
            yield from _paths(item, (*path, index))
    elif isinstance(value, bytes) and path:
        inner = _nested(value)
        if inner is not None:
            yield from _paths(inner[1], (*path, f"<{inner[0]}>"))


def _nested(data: bytes) -> tuple[str, Any] | None:
    """The record ``data`` holds, and its format: a map or list in
    MessagePack or JSON; None when it holds none."""
    try:
        value = unpack(data)
        if isinstance(value, dict | list):
            return "msgpack", value
    except Exception:
        pass
    try:
        value = json.loads(data)
        if isinstance(value, dict | list):
            return "json", value
    except Exception:
        pass
    return None


def _get(value: Any, path: Path) -> Any:
    for part in path:
        if isinstance(part, str) and part.startswith("<"):
            nested = _nested(value)
            assert nested is not None
            value = nested[1]
        elif isinstance(value, dict):
            value = value.get(part)
        else:
            value = value[part]
    return value


def _set(value: Any, path: Path, new: Any) -> Any:
    """A copy of ``value`` with ``path`` set to ``new``."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(head, str) and head.startswith("<"):
        fmt, inner = _nested(value) or ("", None)
        changed = _set(inner, rest, new)
        if fmt == "msgpack":
            return pack(changed)
        # NaN and inf as Python's JSON writes them (NaN, Infinity); bytes as a string.
        return json.dumps(changed, default=lambda raw: raw.hex()).encode()
    if isinstance(value, dict):
        return {**value, head: _set(value.get(head), rest, new)}
    copy = list(value)
    copy[head] = _set(copy[head], rest, new)
    return copy
