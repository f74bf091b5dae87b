"""Attributes as people type them in a filter: ``NAME=VALUE``, one at a time.

``stepstone ls --attr`` takes one per option, and the web view's runs list
a field of them separated by commas. What cannot be read raises ValueError
naming the one that is not (InvalidAttribute, for a name or value the
store would refuse, is one).
"""

from __future__ import annotations

from collections.abc import Sequence

from stepstone.records.attributes import check_attributes


def parse_attributes(given: Sequence[str], *, where: str = "--attr") -> dict[str, str]:
    """The attributes ``given``, each ``NAME=VALUE``, checked; ValueError
    naming the one that is not (``where`` says what gave them)."""
    attributes: dict[str, str] = {}
    for text in given:
        name, equals, value = text.partition("=")
        if not equals:
            raise ValueError(f"{where} {text[:80]!r}: expected NAME=VALUE")
        if name in attributes and attributes[name] != value:
            raise ValueError(f"{where}: {name[:40]!r} given twice, with two values")
        attributes[name] = value
    return check_attributes(attributes, where=where)
