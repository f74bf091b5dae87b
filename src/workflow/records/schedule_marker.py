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
    first = fields.get("first", False)
    if not isinstance(first, bool):
        raise plausible.Implausible("first is not true or false")
    run = fields.get("run")
    if run is not None and not is_storable_id(run):
        raise plausible.Implausible("run is not a run id")
    return Marker(
        tick=plausible.time(fields["tick"], "its tick", now=now, ahead=MARKER_AHEAD),
        name=_optional_name(fields.get("name"), "name"),
        spec=_optional_name(fields.get("spec"), "spec"),
        missed=missed,
        next_tick=plausible.optional_time(fields.get("next"), "next", now=now, ahead=NEXT_AHEAD),
        run=run,
        first=first,
    )


def _optional_name(value: object, field: str) -> str | None:
    return None if value is None else plausible.name(value, field, longest=1000)
