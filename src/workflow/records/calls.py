"""A run's calls in order: what each memo of its history records.

Each step, sleep, event take, child submit, stream write and callback of a
run takes the next position in it (1, 2, ...), and its memo is keyed by that position
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
from stepstone.records.layout import Path
from stepstone.records.payloads import Payloads
from stepstone.runtime import plausible
from stepstone.store.parts import Body, SplitObject

PATCH_MEMO = "!patch."
"""The start of a patch decision's memo key (``!patch.<change-id>@n``)."""
VERSION_WAIT_MEMO = "!version@"
"""The start of the memo that keeps since when a run waits for a worker of
another code version at a place of its history (``!version@#b2-00000003``)."""
CHANGED_ARGS_MEMO = "!args@"
"""The start of the note that a replay called a recorded step with other
arguments than it recorded (``!args@#00000003``)."""
CALLBACK_TAKE_MEMO = "!callback@"
"""The start of the memo of what a callback's wait took (its completion, or
its expiry), keyed by the callback's place: ``!callback@b2-00000003``
(:mod:`stepstone.records.callbacks`)."""
ATTRIBUTE_MARK = "!attr."
"""The start of the mark of an attribute a run set (``!attr.<name>=<value>``:
:mod:`stepstone.records.attributes`)."""
OUTSIDE_HISTORY = (
    "!rate.",
    ATTRIBUTE_MARK,
    PATCH_MEMO,
    VERSION_WAIT_MEMO,
    CHANGED_ARGS_MEMO,
    CALLBACK_TAKE_MEMO,
)
"""The starts of the keys of memos keyed by name that are no call of the
run's history: a rate limit's start, a patch decision, a wait for a version,
a note of changed arguments, what a callback's wait took, an attribute's mark."""

CALLS = (
    "step",
    "sleep",
    "event",
    "deadline",
    "child",
    "stream",
    "stream-close",
    "callback",
    "attributes",
)
"""The calls that take a position: a step, a sleep's wake time, an event
wait's take and its deadline (two positions per wait), a child's submit, a
write to a stream and its close (:mod:`stepstone.execute.streams`), a
callback made (:mod:`stepstone.execute.callbacks`), attributes set
(:mod:`stepstone.execute.attributes`)."""


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
        if self.call == "stream":
            return f"a write to stream {self.name!r}"
        if self.call == "stream-close":
            return f"the close of stream {self.name!r}"
        if self.call == "callback":
            return f"callback {self.name!r}"
        if self.call == "attributes":
            return "a setting of attributes"
        return f"{self.call} {self.name!r}"


@dataclass(frozen=True, slots=True)
class PositionedMemo:
    """One memo of a run's history: its place (its branch and its position
    there), its call and its value (the value's own encoding,
    :class:`stepstone.records.codec.ResultCodec`'s; a large one as Parts, or
    read back decoded, :mod:`stepstone.records.large_values`), and what the
    engine learnt when it was recorded: a fingerprint of a step's
    arguments, the code version that recorded it, and when the call began
    and was recorded (the worker's clock)."""

    position: int
    call: Call
    value: Stored
    branch: Path = ()
    args: str | None = None
    """A step's arguments' fingerprint (:func:`stepstone.records.fingerprint.of`)."""
    by: str | None = None
    """The code version of the worker that recorded it (its build id, or
    the job type's VERSION, or a digest of its code)."""
    began: float | None = None
    ended: float | None = None
    numbered: bool = False
    """Recorded by an engine that numbers calls by branch (it says ``br``)."""

    def encode(self) -> Body:
        fields: dict[str, object] = {
            "pos": self.position,
            "call": self.call.call,
            "name": self.call.name,
            "br": list(self.branch),
        }
        if self.args is not None:
            fields["args"] = self.args
        if self.by is not None:
            fields["by"] = self.by
        if self.began is not None and self.ended is not None:
            fields["t"] = [self.began, self.ended]
        fields["value"] = self.value
        return record_body(fields, "value")

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
        branch = raw.get("br", [])
        if not isinstance(branch, list) or len(branch) > MAX_DEPTH:
            raise ValueError(f"its branch is not a list of at most {MAX_DEPTH} task numbers")
        for step in branch:
            plausible.count(step, "a task number of its branch", least=1)
        # What only informs (a fingerprint, the code version, the times) is
        # dropped when it could not be real, rather than fail the memo.
        args, by = _text(raw.get("args"), FINGERPRINT_LONGEST), _text(raw.get("by"), 255)
        began, ended = _times(raw.get("t"))
        return cls(
            position,
            Call(call, name),
            found if value is None else value,
            tuple(branch),
            args,
            by,
            began,
            ended,
            numbered="br" in raw,
        )

    @classmethod
    def read_split(cls, found: SplitObject, field: LargeField) -> PositionedMemo:
        """The memo ``get_split`` read with ``field`` (with :func:`memo_value`);
        ValueError when it is no such record (also when its large value does
        not decode)."""
        small, value = rejoined(found, field)
        return cls.decode(small, value)


MAX_DEPTH = 100
"""The deepest branch a memo may name (tasks in tasks in tasks ...)."""
FINGERPRINT_LONGEST = 64


def _text(value: object, longest: int) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= longest else None


def _times(value: object) -> tuple[float | None, float | None]:
    """A memo's (began, ended), when both are times that could be real."""
    if not isinstance(value, list) or len(value) != 2:
        return None, None
    try:
        began, ended = (plausible.time(t, "a memo's time") for t in value)
    except plausible.Implausible:
        return None, None
    return began, ended


def memo_value(payloads: Payloads | None = None) -> LargeField:
    """What finds a memo's value in its first bytes, for ``get_split`` (a
    sealed one opened with ``payloads``)."""
    return LargeField("value", payloads)
