"""The slots of one concurrency key: who holds them, who waits, who to wake.

Pure decisions over one table, no I/O and no clock of its own: the caller
reads the table, applies an operation with the time, and writes the result
back by compare-and-swap (:mod:`stepstone.limits.shared`). The tests drive
these functions directly.

A table holds:

- **holders**: the runs in flight under the key, each with the token its
  claim drew when it took the slot and ``until``, a lease past the expiry
  of the job's lease, which the holder carries forward at every renewal of
  that lease (stepstone.execute.admission says why the lease more). A holder
  whose ``until`` has passed crashed or hung: every operation drops it, so
  its slot frees a lease after its lease lapsed. So does one whose ``until``
  could not be real (not a number, more than ``HOLD_AHEAD`` ahead: a lease
  is renewed by heartbeat, its expiry is never that far off), which would
  otherwise block its key for good.
- **limit**: how many may hold a slot, as the job type declares it (every
  acquire writes it afresh); one that could not be real (below 1, above
  ``plausible.MAX_COUNT``) counts as 1 until then, so a release still wakes
  the first in line, who takes the slot under the type's own limit.
- **waiters**: the runs that found the key full, in the order they asked,
  each with when it was last woken (None: not since it asked; a time that
  could not be real, not a number or ahead of now by more than ``grace``,
  counts as None).

The rules:

- **First come, first served.** A run may take a slot when fewer than
  ``limit`` runs hold one and no waiter is ahead of it: with ``free`` slots,
  the first ``free`` waiters may take them, and a run that is not waiting
  only when fewer than ``free`` runs wait. Everyone else waits, in order.
- **Woken in order.** Every operation ends by marking the first ``free``
  waiters woken and telling the caller to wake them (one whose wake is
  older than ``grace`` seconds and who has not come is woken again: that
  wake was lost). A woken waiter that finds the slot taken after all keeps
  its place.
- **Fenced.** A release or renewal names the holder's token: one whose entry
  is gone (dropped as lapsed, taken over) changes nothing and hears so.
- **One entry per run.** A run is claimed by one worker at a time, so a
  live holder entry of the same run under another token belongs to an
  earlier claim of it that has ended without releasing (it suspended for
  its rate limit start holding its slot, or its release failed): the new
  claim takes it over, whoever waits. (An earlier claim whose lease lapsed
  has a lapsed entry too: they are renewed together.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from stepstone.runtime import plausible
from stepstone.runtime.store_queue.records import CorruptRecord

HOLD_AHEAD = plausible.LEASE_AHEAD + plausible.MAX_LEASE
"""Seconds ahead of now past which a holder's ``until`` (a lease expiry,
and a lease past it) could not be real."""


@dataclass(frozen=True, slots=True)
class Holder:
    run: str
    token: str
    until: float
    """Clock time the holder's lease runs out, as last renewed."""


@dataclass(frozen=True, slots=True)
class Waiter:
    run: str
    woken_at: float | None = None


@dataclass(frozen=True, slots=True)
class SlotTable:
    """The slots of one key of one job type."""

    job: str
    """The job type's NAME (with ``key``, for people reading the object)."""
    key: str
    """The concurrency key, as the job gave it."""
    limit: int
    holders: tuple[Holder, ...] = ()
    waiters: tuple[Waiter, ...] = ()

    @property
    def free(self) -> int:
        return max(0, self.limit - len(self.holders))

    def position(self, run: str) -> int:
        """Where ``run`` stands in line: its index among the waiters, or the
        end of the line if it is not waiting."""
        for index, waiter in enumerate(self.waiters):
            if waiter.run == run:
                return index
        return len(self.waiters)


@dataclass(frozen=True, slots=True)
class SlotDecision:
    """What an operation decided."""

    table: SlotTable | None
    """The new table; None when nobody holds or waits (the object goes)."""
    held: bool
    """acquire: the run now holds a slot. release, renew: it held one."""
    ahead: int = 0
    """acquire, when it must wait: how many runs wait ahead of it."""
    wake: tuple[str, ...] = ()
    """Runs to wake: a slot is theirs."""


def acquire(
    table: SlotTable | None,
    *,
    job: str,
    key: str,
    limit: int,
    run: str,
    token: str,
    until: float,
    now: float,
    grace: float,
) -> SlotDecision:
    """``run`` asks for a slot: it takes one, or waits in line."""
    base = table if table is not None else SlotTable(job, key, limit)
    current = _without_lapsed(replace(base, limit=limit), now)
    others = tuple(h for h in current.holders if h.run != run)
    ahead = current.position(run)
    if len(others) < len(current.holders) or ahead < current.free:
        waiters = tuple(w for w in current.waiters if w.run != run)
        holders = (*others, Holder(run, token, until))
        return _woken(replace(current, holders=holders, waiters=waiters), True, now, grace)
    if ahead == len(current.waiters):
        current = replace(current, waiters=(*current.waiters, Waiter(run)))
    else:  # it came (woken or not) and finds no room after all: it keeps its place
        waiters = tuple(Waiter(w.run) if w.run == run else w for w in current.waiters)
        current = replace(current, waiters=waiters)
    decision = _woken(current, False, now, grace)
    return replace(decision, ahead=ahead)


def release(
    table: SlotTable | None, *, run: str, token: str, now: float, grace: float
) -> SlotDecision:
    """The holder ``(run, token)`` is done: its slot goes to the next in line."""
    if table is None:
        return SlotDecision(None, held=False)
    held = Holder(run, token, 0.0)
    holders = tuple(h for h in table.holders if not _same(h, held))
    current = _without_lapsed(replace(table, holders=holders), now)
    return _woken(current, len(holders) < len(table.holders), now, grace)


def renew(
    table: SlotTable | None, *, run: str, token: str, until: float, now: float, grace: float
) -> SlotDecision:
    """Carry the holder ``(run, token)`` to ``until``; ``held`` False if it is
    no longer a holder. Its own entry counts even if it lapsed: had anyone
    acted on the lapse, the entry would be gone."""
    if table is None:
        return SlotDecision(None, held=False)
    wanted = Holder(run, token, until)
    holders = tuple(
        replace(h, until=max(h.until, until)) if _same(h, wanted) else h for h in table.holders
    )
    held = any(_same(h, wanted) for h in table.holders)
    current = _without_lapsed(replace(table, holders=holders), now, keep=wanted)
    return _woken(current, held, now, grace)


def forget(table: SlotTable | None, *, run: str, now: float, grace: float) -> SlotDecision:
    """``run`` has ended (or is gone): drop its holder entry and its place in
    line, without a token (for a run that could not release, and a waiter
    whose wake found no job)."""
    if table is None:
        return SlotDecision(None, held=False)
    holders = tuple(h for h in table.holders if h.run != run)
    waiters = tuple(w for w in table.waiters if w.run != run)
    current = _without_lapsed(replace(table, holders=holders, waiters=waiters), now)
    return _woken(current, len(holders) < len(table.holders), now, grace)


def _same(a: Holder, b: Holder) -> bool:
    return a.run == b.run and a.token == b.token


def _without_lapsed(table: SlotTable, now: float, *, keep: Holder | None = None) -> SlotTable:
    """``table`` without its lapsed holders, and its limit one that could be real."""
    holders = tuple(
        h
        for h in table.holders
        if now < h.until <= now + HOLD_AHEAD or (keep is not None and _same(h, keep))
    )
    if not _real_limit(table.limit):
        table = replace(table, limit=1)
    return table if len(holders) == len(table.holders) else replace(table, holders=holders)


def _real_limit(limit: int) -> bool:
    return 1 <= limit <= plausible.MAX_COUNT


def implausible(table: SlotTable | None, now: float, grace: float) -> list[str]:
    """What in ``table`` could not be real (each operation repairs it: see
    the module docstring), for a warning naming the table."""
    if table is None:
        return []
    found = [] if _real_limit(table.limit) else [f"limit {table.limit!r}"]
    found += [
        f"holder {h.run} until {h.until!r}"
        for h in table.holders
        if not h.until <= now + HOLD_AHEAD  # (NaN too)
    ]
    found += [
        f"waiter {w.run} woken at {w.woken_at!r}"
        for w in table.waiters
        if w.woken_at is not None and not _woken_time(w.woken_at, now, grace)
    ]
    return found


def _woken_time(at: float, now: float, grace: float) -> bool:
    return math.isfinite(at) and at <= now + grace


def _woken(table: SlotTable, held: bool, now: float, grace: float) -> SlotDecision:
    """Mark the waiters next in line as woken; name those to wake now."""
    wake: list[str] = []
    waiters = list(table.waiters)
    for index, waiter in enumerate(waiters[: table.free]):
        woken_at = waiter.woken_at
        if woken_at is None or not _woken_time(woken_at, now, grace) or now - woken_at >= grace:
            waiters[index] = Waiter(waiter.run, now)
            wake.append(waiter.run)
    if wake:
        table = replace(table, waiters=tuple(waiters))
    return SlotDecision(_stored(table), held=held, wake=tuple(wake))


def _stored(table: SlotTable) -> SlotTable | None:
    return table if table.holders or table.waiters else None


# -- in the store ----------------------------------------------------------------


def to_fields(table: SlotTable) -> dict[str, Any]:
    return {
        "job": table.job,
        "key": table.key,
        "limit": table.limit,
        "holders": [[h.run, h.token, h.until] for h in table.holders],
        "waiters": [[w.run, w.woken_at] for w in table.waiters],
    }


def from_fields(fields: Any, key: str) -> SlotTable:
    """The table stored under ``key``; raises CorruptRecord naming it."""
    try:
        limit = fields["limit"]
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise TypeError(f"limit is {plausible.shown(limit)}, not a whole number")
        return SlotTable(
            job=str(fields["job"]),
            key=str(fields["key"]),
            limit=limit,
            holders=tuple(Holder(str(r), str(t), float(u)) for r, t, u in fields["holders"]),
            waiters=tuple(
                Waiter(str(r), None if w is None else float(w)) for r, w in fields["waiters"]
            ),
        )
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise CorruptRecord(f"not a concurrency slot table: {exc!r}", key=key) from exc
