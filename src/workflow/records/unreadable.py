"""A stored object that would not decode: what a listing or a read reports in
its place (its key, and why), so one bad object never fails the command."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A stored object that would not decode: its key, and why."""

    key: str
    reason: str
