"""A schedule's marker, ``schedules/<name>``: the last tick a schedule
submitted, and what an operator's tools show of the schedule beside it.

The tick is what the schedulers agree by (:mod:`stepstone.schedules`). The
rest says what the last writer knew, so a view with no application code
(``stepstone ui s3://...``) can show the schedule: its name (the key holds
it percent-encoded, or hashed when long), how it ticks (``spec``), its
missed-tick policy, the tick after the marker's, and the run the marker's
tick submitted (None when it submitted none: a schedule first seen, a
marker repaired, a tick ``missed="skip"`` left out), and whether the tick
is where the schedule started rather than one of its ticks. A marker written
before these fields existed holds the tick alone; every field but the tick
may be missing.

Beside these, what the schedule's overlap policy and its operators keep
(:mod:`stepstone.schedule_overlap`): the run it started last and whether
that start is still to be made (``pending``: decided, maybe not yet
submitted, with the run to cancel first under ``cancel_other``), the ticks
buffered behind it, the last tick skipped and why, and whether it is paused
(by whom, when, with what note) or when it was last resumed.

Decoding checks every value (:mod:`stepstone.runtime.plausible`): a
marker that does not decode or holds what no scheduler could have written
raises ValueError naming it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from stepstone.records.codec import pack, unpack
from stepstone.runtime import plausible
from stepstone.runtime.run_id import is_storable_id

MARKER_AHEAD = 86_400.0
"""Seconds ahead of now past which a marker's tick could not be real (it is
a tick already submitted; this leaves room for clocks that disagree)."""
NEXT_AHEAD = 400 * 86_400.0
"""Seconds ahead of now a marker's next tick may lie (a yearly cron's)."""
POLICIES = ("latest", "all", "skip")
OVERLAPS = ("skip", "buffer_one", "buffer_all", "cancel_other", "allow_all")
MAX_BUFFERED = 100
"""Ticks a marker buffers at most (``buffer_all``): those after are skipped."""
LONGEST_NOTE = 500
"""Characters of a pause's note (or a skip's reason) a marker keeps."""
MAX_MARKER_BYTES = 64 * 1024
"""Bytes past which an object under ``schedules/`` is no marker (one is a
few hundred bytes): a reader names it without reading it."""


def tick_run_id(name: str, tick: float) -> str:
    """The run id of schedule ``name``'s run at ``tick`` (epoch seconds): the
    same in every process, so each tick runs once."""
    return hashlib.sha256(f"schedule/{name}/{tick:.6f}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Marker:
    tick: float
    """The last tick submitted (or skipped, or where the schedule started)."""
    name: str | None = None
    spec: str | None = None
    """How it ticks, for people: ``cron 0 9 * * * (Europe/Paris)``, ``every 0:05:00``."""
    missed: str | None = None
    next_tick: float | None = None
    """The schedule's first tick after ``tick``."""
    run: str | None = None
    """The run ``tick`` submitted; None if it submitted none."""
    first: bool = False
    """``tick`` is where the schedule started (first seen, or its marker
    repaired), not a tick of it."""
    overlap: str | None = None
    latest: str | None = None
    """The run the schedule started last (its overlap policy asks whether it is live)."""
    latest_tick: float | None = None
    pending: bool = False
    """``latest`` was decided, and may not have been submitted yet: whoever
    reads the marker next submits it (the same run id: one run) before
    deciding anything else."""
    cancel: str | None = None
    """With ``pending``: the run to cancel before ``latest`` starts (``cancel_other``)."""
    buffered: tuple[float, ...] = ()
    """Ticks waiting for ``latest`` to end, oldest first."""
    skipped_tick: float | None = None
    """The last tick skipped (not run), and why (``skipped_why``)."""
    skipped_why: str | None = None
    paused: bool = False
    paused_at: float | None = None
    paused_by: str | None = None
    note: str | None = None
    """What the operator who paused it said."""
    resumed_at: float | None = None
    """When it was last resumed: its ticks up to then came while it was paused."""

    def encode(self) -> bytes:
        return pack(
            {
                "tick": self.tick,
                "name": self.name,
                "spec": self.spec,
                "missed": self.missed,
                "next": self.next_tick,
                "run": self.run,
                "first": self.first,
                "overlap": self.overlap,
                "latest": self.latest,
                "latest_tick": self.latest_tick,
                "pending": self.pending,
                "cancel": self.cancel,
                "buffered": list(self.buffered),
                "skipped_tick": self.skipped_tick,
                "skipped_why": self.skipped_why,
                "paused": self.paused,
                "paused_at": self.paused_at,
                "paused_by": self.paused_by,
                "note": self.note,
                "resumed_at": self.resumed_at,
            }
        )


def decode_marker(data: bytes, *, now: float) -> Marker:
    """The marker in ``data``; raises ValueError (Implausible among them)
    saying what is wrong when it does not decode or could not be real."""
    fields = unpack(data)
    if not isinstance(fields, dict) or "tick" not in fields:
        raise ValueError("not a schedule marker")
    missed = fields.get("missed")
    if missed is not None and missed not in POLICIES:
        raise plausible.Implausible(f"missed is not one of {', '.join(POLICIES)}")
    overlap = fields.get("overlap")
    if overlap is not None and overlap not in OVERLAPS:
        raise plausible.Implausible(f"overlap is not one of {', '.join(OVERLAPS)}")
    buffered = fields.get("buffered", [])
    if not isinstance(buffered, list) or len(buffered) > MAX_BUFFERED:
        raise plausible.Implausible(f"buffered is not a list of at most {MAX_BUFFERED} ticks")

    def when(field: str) -> float | None:
        return plausible.optional_time(fields.get(field), field, now=now, ahead=MARKER_AHEAD)

    return Marker(
        tick=plausible.time(fields["tick"], "its tick", now=now, ahead=MARKER_AHEAD),
        name=_optional_name(fields.get("name"), "name"),
        spec=_optional_name(fields.get("spec"), "spec"),
        missed=missed,
        next_tick=plausible.optional_time(fields.get("next"), "next", now=now, ahead=NEXT_AHEAD),
        run=_optional_id(fields.get("run"), "run"),
        first=_flag(fields.get("first", False), "first"),
        overlap=overlap,
        latest=_optional_id(fields.get("latest"), "latest"),
        latest_tick=when("latest_tick"),
        pending=_flag(fields.get("pending", False), "pending"),
        cancel=_optional_id(fields.get("cancel"), "cancel"),
        buffered=tuple(
            plausible.time(tick, "a buffered tick", now=now, ahead=MARKER_AHEAD)
            for tick in buffered
        ),
        skipped_tick=when("skipped_tick"),
        skipped_why=_optional_text(fields.get("skipped_why"), "skipped_why"),
        paused=_flag(fields.get("paused", False), "paused"),
        paused_at=when("paused_at"),
        paused_by=_optional_name(fields.get("paused_by"), "paused_by"),
        note=_optional_text(fields.get("note"), "note"),
        resumed_at=when("resumed_at"),
    )


def _flag(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise plausible.Implausible(f"{field} is not true or false")
    return value


def _optional_id(value: object, field: str) -> str | None:
    if value is not None and not is_storable_id(value):
        raise plausible.Implausible(f"{field} is not a run id")
    return value  # type: ignore[return-value]


def _optional_text(value: object, field: str) -> str | None:
    return None if value is None else plausible.name(value, field, longest=LONGEST_NOTE)


def _optional_name(value: object, field: str) -> str | None:
    return None if value is None else plausible.name(value, field, longest=1000)
