"""A run's calls in order: what each memo of its history records.

Each step, sleep, event take and child submit of a run takes the next
position in it (1, 2, ...), and its memo is keyed by that position
(:func:`stepstone.records.layout.position_key`) and records which call it
was (:class:`Call`) beside its value. A replay asks, at each position, for
the call the code makes now, and compares: another call where one was
recorded is a divergence (:class:`stepstone.errors.NonDeterministicReplay`),
caught before anything runs. Keying by position also makes the first
writer win per position, so two claims of a run on different code cannot
both record a call there.
"""

from __future__ import annotations

from dataclasses import dataclass

from stepstone.records.codec import unpack
from stepstone.records.large_values import LargeField, Stored, record_body, rejoined
from stepstone.runtime import plausible
from stepstone.store.parts import Body, SplitObject

PATCH_MEMO = "!patch."
"""The start of a patch decision's memo key (``!patch.<change-id>@n``)."""
OUTSIDE_HISTORY = ("!rate.", PATCH_MEMO)
"""The starts of the keys of memos keyed by name that are no call of the
run's history: a rate limit's turn, a patch decision."""

CALLS = ("step", "sleep", "event", "deadline", "child")
"""The calls that take a position: a step, a sleep's wake time, an event
wait's take and its deadline (two positions per wait), a child's submit."""


@dataclass(frozen=True, slots=True)
class Call:
    """Which call of the run a memo records: its sort and its name (a step's
    name, an event's name, a child's kind; empty for a sleep)."""

    call: str
    name: str

    def describe(self) -> str:
        """The call as words: ``step 'charge'``, ``a sleep``, ``a wait for event 'approval'``."""
        if self.call == "sleep":
            return "a sleep"
        if self.call == "event":
            return f"a wait for event {self.name!r}"
        if self.call == "deadline":
            return f"the deadline of a wait for event {self.name!r}"
        if self.call == "child":
            return f"a child submit of kind {self.name!r}"
        return f"{self.call} {self.name!r}"


@dataclass(frozen=True, slots=True)
class PositionedMemo:
    """One memo of a run's history: its position, its call and its value
    (the value's own encoding, :class:`stepstone.records.codec.ResultCodec`'s;
    a large one as Parts, or read back decoded,
    :mod:`stepstone.records.large_values`)."""

    position: int
    call: Call
    value: Stored

    def encode(self) -> Body:
        return record_body(
            {
                "pos": self.position,
                "call": self.call.call,
                "name": self.call.name,
                "value": self.value,
            },
            "value",
        )

    @classmethod
    def decode(cls, data: bytes, value: Stored | None = None) -> PositionedMemo:
        """Raises ValueError saying what is wrong when ``data`` is no such
        record. ``value``: the large value :func:`read_split` took out of it."""
        try:
            raw = unpack(data)
        except Exception as exc:
            raise ValueError(f"not MessagePack: {exc}") from None
        if not isinstance(raw, dict):
            raise ValueError("not a memo of a run's history")
        position, call, name, found = (raw.get(k) for k in ("pos", "call", "name", "value"))
        if not isinstance(position, int) or not isinstance(call, str) or not isinstance(name, str):
            raise ValueError("its position, call or name is missing or of the wrong type")
        if not isinstance(found, bytes):
            raise ValueError("its value is missing or of the wrong type")
        plausible.count(position, "its position", least=1)  # (an Implausible is a ValueError)
        return cls(position, Call(call, name), found if value is None else value)

    @classmethod
    def read_split(cls, found: SplitObject, field: LargeField) -> PositionedMemo:
        """The memo ``get_split`` read with ``field`` (with :func:`memo_value`);
        ValueError when it is no such record (also when its large value does
        not decode)."""
        small, value = rejoined(found, field)
        return cls.decode(small, value)


def memo_value() -> LargeField:
    """What finds a memo's value in its first bytes, for ``get_split``."""
    return LargeField("value")
