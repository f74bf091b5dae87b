"""What a time, count or index read from a record may be: :func:`time`, :func:`count`.

A record that decodes can still hold a value no run could have written: a
time of ``inf`` or ``1e20``, a NaN, a claim number of two million, a
negative count. Used as it is, such a value crashes whatever formats it,
switches a control off (a NaN compares false with everything) or holds a
run for centuries. So every decoder of a record checks each time, count and
index it reads against what could be real, and a value that fails makes the
record corrupt (its decoder says so, naming its key), or, where the engine
can safely start afresh (a rate limit's state, a schedule's marker), is
repaired with a warning naming the record.

What could be real:

- a **time** is a finite number of seconds since the epoch within
  ``WINDOW`` (a hundred years) of now; a use may ask for less (a lease
  expiry is not more than ``LEASE_AHEAD`` ahead);
- a **count** or an **index** is a whole number from 0 (or 1) to
  ``MAX_COUNT``;
- a **duration** (a pace, a period) is a finite number of seconds in the
  range its use allows;
- a **name** (a worker's id, a host) is printable text of a bounded length.
"""

from __future__ import annotations

import math
import time as _time

WINDOW = 100 * 365.25 * 86_400.0
"""Seconds from now (either way) a time read from a record may lie."""
MAX_COUNT = 1_000_000
"""The largest count or index a record may hold (claims, attempts, sizes of
lists it keeps): more than any run makes, few enough to show."""
MAX_REVISION = 2**53
"""The largest revision a record may hold: every write bumps it (a long
run's lease renewals too), so it may pass ``MAX_COUNT``, but never this."""
MAX_LEASE = 86_400.0
"""The longest lease a claim may ask for, in seconds (a worker's ``lease``,
a job type's ``Job.lease``, ``ctx.lease.ensure_at_least``): a lease is
renewed by heartbeat while its run lives, so it need never be longer."""
LATEST_DUE = 253_402_300_799.0
"""The latest time a job may be due (its run-at): the end of year 9999, the
last a datetime holds, and the last wake time a durable wait takes. A
job may wait that long; an outcome's or an attempt's times may not lie
past ``WINDOW``."""
LEASE_AHEAD = 2 * MAX_LEASE
"""How far ahead of now a lease expiry read from a record may lie: the
longest lease, with as much again for another process's clock. Further
ahead, a holder that died would hold its run (or its slot) for good."""


class Implausible(ValueError):
    """A value read from a record that no run could have written; the message
    names the field and the value."""


def time(value: object, field: str, *, now: float | None = None, ahead: float = WINDOW) -> float:
    """``value`` as a time, if it is one that could be real: finite, not
    more than ``WINDOW`` before ``now`` (the wall clock when not given),
    nor more than ``ahead`` after it. Raises :class:`Implausible`."""
    at = _time.time() if now is None else now
    return _between(value, field, at - WINDOW, at + min(ahead, WINDOW))


def due(value: object, field: str, *, now: float | None = None) -> float:
    """``value`` as a run-at time, if it could be real: a :func:`time`, but
    as far ahead as ``LATEST_DUE``. Raises :class:`Implausible`."""
    at = _time.time() if now is None else now
    return _between(value, field, at - WINDOW, LATEST_DUE)


def _between(value: object, field: str, earliest: float, latest: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Implausible(f"{field} is not a time: {shown(value)}")
    seconds = float(value)
    if not math.isfinite(seconds):
        raise Implausible(f"{field} is not a time: {seconds!r}")
    if not earliest <= seconds <= latest:
        raise Implausible(f"{field} {seconds!r} is not a time near now")
    return seconds


def optional_time(
    value: object, field: str, *, now: float | None = None, ahead: float = WINDOW
) -> float | None:
    """:func:`time`, or None for None."""
    return None if value is None else time(value, field, now=now, ahead=ahead)


def count(value: object, field: str, *, least: int = 0, most: int = MAX_COUNT) -> int:
    """``value`` as a count or an index, if it is a whole number from
    ``least`` to ``most``. Raises :class:`Implausible`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise Implausible(f"{field} is not a whole number: {shown(value)}")
    if not least <= value <= most:
        raise Implausible(f"{field} {value} is not from {least} to {most}")
    return value


def optional_count(
    value: object, field: str, *, least: int = 0, most: int = MAX_COUNT
) -> int | None:
    """:func:`count`, or None for None."""
    return None if value is None else count(value, field, least=least, most=most)


def duration(value: object, field: str, *, least: float, most: float) -> float:
    """``value`` as seconds, if it is a finite number from ``least`` to
    ``most``. Raises :class:`Implausible`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Implausible(f"{field} is not a number of seconds: {shown(value)}")
    seconds = float(value)
    if not (math.isfinite(seconds) and least <= seconds <= most):
        raise Implausible(f"{field} {seconds!r} is not from {least:g} to {most:g} seconds")
    return seconds


def name(value: object, field: str, *, longest: int = 255) -> str:
    """``value`` as a name shown to people, if it is printable text of 1 to
    ``longest`` characters. Raises :class:`Implausible`."""
    if not isinstance(value, str):
        raise Implausible(f"{field} is not text: {shown(value)}")
    if not 0 < len(value) <= longest or not value.isprintable():
        raise Implausible(
            f"{field} is not a printable name of 1 to {longest} characters: {shown(value)}"
        )
    return value


def shown(value: object) -> str:
    """A value for a message, short whatever it holds (a list of a million
    items is not written out in a log line)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."
