"""A run's attributes, and the index that finds runs by them.

Attributes are names and values a run is given at submit
(``SubmitOptions(attributes=...)``) or sets as it runs
(``ctx.set_attributes``), to be found by later (``runner.runs(attributes=...)``,
``stepstone ls --attr``, the web view's filter). Each one a run has is an
empty object in the index::

    index/attr/<name>/<value>/<run_id>/<incarnation>

so the runs of one value are one LIST by prefix away, whatever else the
bucket holds. ``<value>`` is percent-encoded (any text makes a safe key
segment); the names and values a run may have are checked here
(:func:`check_attributes`), before anything is written.

An entry is written before what it finds: a submit writes its run's entries
before it creates the queue record, ``ctx.set_attributes`` before it records
its memo. So a run that exists has its entries, whatever crash came between;
an entry may name a run that does not exist (the submit that wrote it
crashed, or joined a run already there and could not take it back), and a
listing checks each entry against the run's records and leaves such one
out. An entry names its incarnation, so it finds that incarnation only: a
replay, or a keyed resubmit after a sweep, starts with entries of its own.

An attribute set inside a run also leaves a mark among the run's memos,
``memos/<run_id>/<incarnation>/!attr.<name>=<value>`` (written first), so the
sweep, which lists a run's memos anyway, finds every entry it must remove
without a request more; the attributes given at submit are in the run's
outcome record.
"""

from __future__ import annotations

import asyncio
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

from stepstone.errors import InvalidAttribute
from stepstone.records.calls import ATTRIBUTE_MARK
from stepstone.records.layout import Layout
from stepstone.store import AlreadyExists, NewObject, ObjectStore
from stepstone.store.keys import join

MAX_ATTRIBUTES = 16
"""Attributes a run may have (each one a write when it is given)."""
MAX_NAME = 40
"""Characters in an attribute's name."""
MAX_VALUE_BYTES = 64
"""UTF-8 bytes in an attribute's value (so its key segment, percent-encoded,
fits every store's limit)."""

_NAME = re.compile(rf"^[A-Za-z][A-Za-z0-9_.-]{{0,{MAX_NAME - 1}}}$")

MARK = ATTRIBUTE_MARK

INDEX = "index/attr"
"""Where the index lives under the runner's prefix."""

ORPHAN_AGE = 3600.0
"""Seconds an index entry that names no run stands before a listing that
meets it, or the hourly sweep of the index, deletes it: far longer than a
submit takes from its index entries to its enqueue."""


def check_attributes(attributes: object, *, where: str = "attributes") -> dict[str, str]:
    """``attributes`` as a plain dict if every name and value may be used;
    InvalidAttribute naming the first that may not, before anything is written.

    A name is 1 to 40 characters: letters, digits, ``_``, ``.`` and ``-``,
    starting with a letter. A value is a non-empty str of at most 64 UTF-8
    bytes without control or format characters. A run has at most 16."""
    if not isinstance(attributes, Mapping):
        raise InvalidAttribute(
            f"{where} must be a mapping of names to str values, not {type(attributes).__name__}"
        )
    if len(attributes) > MAX_ATTRIBUTES:
        raise InvalidAttribute(
            f"{where}: {len(attributes)} attributes; a run may have at most {MAX_ATTRIBUTES}"
        )
    checked: dict[str, str] = {}
    for name, value in attributes.items():
        check_name(name, where=where)
        checked[name] = check_value(name, value, where=where)
    return checked


def check_name(name: object, *, where: str = "attributes") -> str:
    """``name`` if it may name an attribute; InvalidAttribute saying why not."""
    if not isinstance(name, str):
        raise InvalidAttribute(f"{where}: an attribute's name must be a str, not {name!r}")
    if not _NAME.match(name):
        raise InvalidAttribute(
            f"{where}: attribute name {name[:60]!r} is not allowed: 1 to {MAX_NAME} "
            "characters, letters, digits, '_', '.' and '-', starting with a letter"
        )
    return name


def check_value(name: str, value: object, *, where: str = "attributes") -> str:
    """``value`` if attribute ``name`` may have it; InvalidAttribute saying why not."""
    if not isinstance(value, str):
        raise InvalidAttribute(
            f"{where}: attribute {name!r} must have a str value, not {type(value).__name__}"
        )
    if not value:
        raise InvalidAttribute(f"{where}: attribute {name!r} has an empty value")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_VALUE_BYTES:
        raise InvalidAttribute(
            f"{where}: attribute {name!r} has a value of {size} bytes; "
            f"at most {MAX_VALUE_BYTES} (UTF-8) are allowed"
        )
    bad = next((char for char in value if unicodedata.category(char)[0] == "C"), None)
    if bad is not None:
        raise InvalidAttribute(
            f"{where}: attribute {name!r} has a value with the control or format character "
            f"U+{ord(bad):04X}; values are printable text"
        )
    return value


def stored_attributes(raw: object) -> dict[str, str]:
    """A record's attributes as stored (a map of str to str; None: none);
    ValueError for anything else."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(
        isinstance(name, str) and isinstance(value, str) for name, value in raw.items()
    ):
        raise ValueError("the attributes are not a map of names to values")
    return raw


def value_segment(value: str) -> str:
    """A value as one key segment: percent-encoded (``.`` too, where the
    whole segment would be dots)."""
    encoded = quote(value, safe="")
    return encoded.replace(".", "%2E") if encoded in (".", "..") else encoded


def values_prefix(layout: Layout, name: str, value: str) -> str:
    """The prefix of the entries of the runs whose ``name`` is ``value``."""
    return join(layout.prefix, INDEX, name, value_segment(value)) + "/"


def entry_key(layout: Layout, name: str, value: str, run_id: str, incarnation: str) -> str:
    """The index entry of one attribute of one incarnation of a run."""
    return values_prefix(layout, name, value) + f"{run_id}/{incarnation}"


@dataclass(frozen=True, slots=True)
class Entry:
    """An index entry, as a listing read its key: which run and incarnation."""

    run_id: str
    incarnation: str


def entry_of(prefix: str, key: str) -> Entry | None:
    """The run an entry listed under ``prefix`` names; None for a key that
    names none (put there by something else)."""
    run_id, slash, incarnation = key[len(prefix) :].partition("/")
    if not slash or not run_id or not incarnation or "/" in incarnation:
        return None
    return Entry(run_id, incarnation)


def mark_segment(name: str, value: str) -> str:
    """The key segment of an attribute's mark among a run's memos."""
    return f"{MARK}{name}={value_segment(value)}"


def marked(segment: str) -> tuple[str, str] | None:
    """The attribute a memo key segment marks; None for any other memo."""
    if not segment.startswith(MARK):
        return None
    name, equals, value = segment[len(MARK) :].partition("=")
    return (name, unquote(value)) if equals and name and value else None


async def write_entries(
    store: ObjectStore,
    layout: Layout,
    runs: Iterable[tuple[str, str, Mapping[str, str]]],
) -> None:
    """Create the index entries of each (run id, incarnation, attributes) of
    ``runs`` in one batch (one flush on files); an entry already there is left."""
    objects = [
        NewObject(entry_key(layout, name, value, run_id, incarnation), b"")
        for run_id, incarnation, attributes in runs
        for name, value in attributes.items()
    ]
    if not objects:
        return
    for result in await store.put_many_if_absent(objects):
        if isinstance(result, Exception) and not isinstance(result, AlreadyExists):
            raise result


async def drop_entries(
    store: ObjectStore,
    layout: Layout,
    run_id: str,
    incarnation: str,
    attributes: Iterable[tuple[str, str]],
) -> None:
    """Delete the index entries of ``attributes`` of one incarnation of a run
    (an entry already gone is no error)."""
    keys = [entry_key(layout, name, value, run_id, incarnation) for name, value in attributes]
    await asyncio.gather(*(store.delete(key) for key in keys))


def attributes_marked(
    layout: Layout, run_id: str, memo_keys: Iterable[str]
) -> set[tuple[str, str]]:
    """The attributes a run's memos mark (those it set, under any of its
    incarnations), from the keys of its memos."""
    memos = layout.memos(run_id)
    found = set()
    for key in memo_keys:
        if key.startswith(memos):
            pair = marked(key[len(memos) :].partition("/")[2])
            if pair is not None:
                found.add(pair)
    return found


async def drop_run_entries(
    store: ObjectStore, layout: Layout, run_id: str, attributes: Iterable[tuple[str, str]]
) -> None:
    """Delete every entry of ``run_id`` under each of ``attributes``,
    whichever incarnation it names (one LIST each): the sweep's, so the
    entries a submit that joined the run left go with it too."""
    for name, value in set(attributes):
        under = values_prefix(layout, name, value) + run_id + "/"
        keys = [info.key async for info in store.scan(under)]
        await asyncio.gather(*(store.delete(key) for key in keys))
