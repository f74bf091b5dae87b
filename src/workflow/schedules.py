"""Schedules: a job submitted at every tick of a cron expression or interval.

Every worker process may carry the same schedules; each tick runs once
across all of them. A tick's run id is derived from the schedule's name and
the tick's time, so the processes that see a tick submit the same run, and
the submit protocol makes it one (the first creates it, the others join it
or read its outcome).

Each schedule keeps one small object, ``schedules/<name>``: the last tick
submitted (:mod:`stepstone.records.schedule_marker`, which also says, for
operators' tools, how the schedule ticks, its next tick and the run the
tick submitted). It says which ticks were missed while no worker ran (from
it to now), and it keeps a tick from running again after retention has
swept its run's records. It only moves forward (compare-and-swap). A
schedule seen for the first time starts from now: nothing before it counts
as missed. A marker that does not decode, or holds a tick that could not be
real (not a number, more than
:data:`stepstone.records.schedule_marker.MARKER_AHEAD` ahead of now, more
than ``stepstone.runtime.plausible.WINDOW`` behind it), is repaired: set to
now, with a warning naming it, as if the schedule were seen for the first
time.

The processes' clocks may disagree by up to :data:`SCHEDULE_CLOCK_SKEW`
seconds, whatever the interval, with no tick dropped: "now" above is that
much earlier (a schedule first seen may run the ticks of those few seconds),
and a tick counts as missed only when it came that much before the process
came up. A process ahead runs each tick when its clock reaches it, so up to
the skew early; one that sees a marker further ahead of its clock warns.

A tick is missed when no process carrying the schedule was up at its time.
A process that finds ticks due runs every one since it came up, however
late it looks (a stalled event loop, a slow or failing store), and those
before as ``missed=`` says: ``"latest"`` (the default) runs only the most
recent one, ``"all"`` runs each of them (at most :data:`MAX_CATCH_UP`, the
newest), ``"skip"`` runs none.

Cron expressions are read by cronsim (Debian cron's rules, DST included),
in the schedule's time zone; ``every=`` ticks are whole multiples of the
interval since ``anchor`` (the Unix epoch by default), so every process
agrees on them without talking.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, Literal
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from stepstone.job import Job
from stepstone.records.layout import Layout, name_key
from stepstone.records.schedule_marker import Marker, decode_marker, tick_run_id
from stepstone.runtime.clock import Clock, subscribe
from stepstone.store import AlreadyExists, NotFound, ObjectStore, PreconditionFailed
from stepstone.submit.submitter import Submitter

log = logging.getLogger("stepstone.schedules")

MAX_CATCH_UP = 100
"""At most this many missed ticks run when a schedule says ``missed="all"``."""
MARKER_TRIES = 5
SCHEDULE_CLOCK_SKEW = 5.0
"""How far the clocks of the processes carrying a schedule may disagree, in
seconds, whatever its interval, with no tick dropped: a process counts a tick
as missed only when it came this long before the process came up, and a
schedule seen for the first time starts this long before now. A process
that finds the marker further ahead of its own clock warns (once)."""
Missed = Literal["latest", "all", "skip"]


@dataclass(frozen=True)
class Schedule:
    """Submit ``job(tick)`` at every tick: of ``cron`` (five fields, in
    ``timezone``) or ``every`` interval. ``job`` gets the tick as an aware
    datetime and returns the Job to run."""

    name: str
    job: Callable[[datetime], Job[Any]]
    cron: str | None = None
    every: timedelta | None = None
    timezone: str | tzinfo = "UTC"
    missed: Missed = "latest"
    anchor: datetime = datetime(1970, 1, 1, tzinfo=UTC)
    """Where ``every`` ticks count from."""
    _zone: tzinfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        name_key(self.name)  # a usable key segment, or a clear error
        if (self.cron is None) == (self.every is None):
            raise ValueError(f"schedule {self.name!r}: give exactly one of cron= or every=")
        if self.every is not None and self.every.total_seconds() <= 0:
            raise ValueError(f"schedule {self.name!r}: every= must be positive")
        if self.missed not in ("latest", "all", "skip"):
            raise ValueError(f"schedule {self.name!r}: missed= is 'latest', 'all' or 'skip'")
        if self.anchor.tzinfo is None:
            raise ValueError(f"schedule {self.name!r}: anchor must be an aware datetime")
        zone = ZoneInfo(self.timezone) if isinstance(self.timezone, str) else self.timezone
        object.__setattr__(self, "_zone", zone)
        if self.cron is not None:
            try:
                CronSim(self.cron, datetime.now(zone))
            except CronSimError as exc:
                raise ValueError(f"schedule {self.name!r}: bad cron {self.cron!r}: {exc}") from None

    def ticks_after(self, after: float) -> Iterator[datetime]:
        """The ticks after ``after`` (epoch seconds), in order, as aware datetimes."""
        if self.every is not None:
            step = self.every.total_seconds()
            start = self.anchor.timestamp()
            n = math.floor((after - start) / step) + 1
            while True:
                yield datetime.fromtimestamp(start + n * step, self._zone)
                n += 1
        assert self.cron is not None
        yield from CronSim(self.cron, datetime.fromtimestamp(after, self._zone))

    def ticks_between(self, after: float, until: float) -> list[datetime]:
        """The ticks in (after, until], oldest first (at most MAX_CATCH_UP, the newest).

        Found without walking the ones left out: a marker a year old on a
        schedule of every second would otherwise hold the event loop for
        tens of seconds. ``every`` ticks are counted, cron ticks read
        backwards from ``until``."""
        if until <= after:
            return []
        if self.every is not None:
            step = self.every.total_seconds()
            start = self.anchor.timestamp()
            first = math.floor((after - start) / step) + 1
            last = math.floor((until - start) / step)
            if start + last * step > until:  # (float rounding)
                last -= 1
            first = max(first, last - MAX_CATCH_UP + 1)
            return [
                datetime.fromtimestamp(start + n * step, self._zone) for n in range(first, last + 1)
            ]
        assert self.cron is not None
        found: list[datetime] = []
        # Backwards from just after ``until`` (a reverse CronSim leaves out its start).
        since = datetime.fromtimestamp(until, self._zone) + timedelta(microseconds=1)
        for tick in CronSim(self.cron, since, reverse=True):
            if tick.timestamp() <= after or len(found) == MAX_CATCH_UP:
                break
            if tick.timestamp() <= until:
                found.append(tick)
        found.reverse()
        return found

    def run_id(self, tick: datetime) -> str:
        """The run id of this schedule's run at ``tick``: the same in every process."""
        return tick_run_id(self.name, tick.timestamp())


class Scheduler:
    """Submits the ticks of ``schedules`` while a worker runs (see the module docstring)."""

    def __init__(
        self,
        schedules: list[Schedule],
        *,
        submitter: Submitter,
        store: ObjectStore,
        layout: Layout,
        clock: Clock,
    ) -> None:
        names = [schedule.name for schedule in schedules]
        if len(set(names)) != len(names):
            raise ValueError(f"two schedules share a name: {sorted(names)}")
        self.schedules = schedules
        self._submitter = submitter
        self._store = store
        self._layout = layout
        self._clock = clock
        self._tasks: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()
        self._unsubscribe: Callable[[], None] = lambda: None
        self._warned: set[str] = set()
        """Schedules whose marker was seen from this clock's future (warned once)."""

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._unsubscribe = subscribe(self._clock, self._wake.set)
        self._tasks = [
            loop.create_task(self._loop(s), name=f"stepstone-schedule {s.name}")
            for s in self.schedules
        ]

    async def stop(self) -> None:
        self._unsubscribe()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def last_tick(self, schedule: Schedule) -> float | None:
        """The last tick of ``schedule`` submitted, by any process (None: never,
        or its marker could not be read: logged, naming it)."""
        found = await self._marker(schedule)
        if found is None:
            return None
        if isinstance(found[1], str):
            log.warning("schedule %r: %s", schedule.name, found[1])
            return None
        return found[1]

    async def _loop(self, schedule: Schedule) -> None:
        up_since = self._clock.now()
        while True:
            try:
                await self._submit_due(schedule, up_since)
            except Exception as exc:
                log.warning(
                    "schedule %r: ticks not submitted (will try again): %s", schedule.name, exc
                )
            await self._sleep_until(next(schedule.ticks_after(self._clock.now())).timestamp())

    async def _submit_due(self, schedule: Schedule, up_since: float) -> None:
        """Submit the ticks due since the marker: every one after ``up_since``
        (this process was up for it), and those before as ``missed`` says."""
        now = self._clock.now()
        found = await self._marker(schedule)
        if found is None:
            # First seen: nothing before counts, by any clock within the bound.
            await self._create_marker(schedule, now - SCHEDULE_CLOCK_SKEW)
            return
        if isinstance(found[1], str):
            await self._repair_marker(schedule, found[0], found[1], now - SCHEDULE_CLOCK_SKEW)
            return
        if found[1] > now + SCHEDULE_CLOCK_SKEW and schedule.name not in self._warned:
            self._warned.add(schedule.name)
            log.warning(
                "schedule %r: its marker (the last tick submitted) is %.1f s ahead of this "
                "process's clock; the clocks of the processes carrying it disagree by more "
                "than %.0f s, so ticks may run early, late or not at all: keep them in step (NTP)",
                schedule.name,
                found[1] - now,
                SCHEDULE_CLOCK_SKEW,
            )
        due = schedule.ticks_between(found[1], now)
        if not due:
            return
        # A tick came before this process was up (missed) only by more than
        # the clocks may disagree: another's clock ahead makes it look so.
        missed = [tick for tick in due if tick.timestamp() <= up_since - SCHEDULE_CLOCK_SKEW]
        kept = {"latest": missed[-1:], "all": missed, "skip": []}[schedule.missed]
        chosen = kept + due[len(missed) :]
        for tick in chosen:
            job = schedule.job(tick)
            await self._submitter.submit(job, run_id=schedule.run_id(tick))
            log.info("schedule %r: submitted the tick of %s", schedule.name, tick.isoformat())
        submitted = chosen[-1].timestamp() if chosen and chosen[-1] == due[-1] else None
        await self._advance_marker(schedule, due[-1].timestamp(), submitted)

    async def _marker(self, schedule: Schedule) -> tuple[str, float | str] | None:
        """The marker's etag and tick (None: there is none); in place of the
        tick, what is wrong with it when it does not decode or could not be real."""
        key = self._layout.schedule(schedule.name)
        try:
            stored = await self._store.get(key)
        except NotFound:
            return None
        try:
            tick = decode_marker(stored.data, now=self._clock.now()).tick
        except Exception as exc:
            return stored.etag, f"its marker {key} cannot be used ({exc})"
        return stored.etag, tick

    async def _repair_marker(self, schedule: Schedule, etag: str, wrong: str, now: float) -> None:
        """Set a marker that cannot be used to ``now`` (see the module docstring;
        the caller's now, less the clocks' skew, as for a schedule first seen)."""
        log.warning("schedule %r: %s; set to now, as for a new schedule", schedule.name, wrong)
        with contextlib.suppress(PreconditionFailed, NotFound):  # someone else wrote it
            await self._store.put_if_match(
                self._layout.schedule(schedule.name), _marker(schedule, now, first=True), etag
            )

    async def _create_marker(self, schedule: Schedule, tick: float) -> None:
        with contextlib.suppress(AlreadyExists):
            await self._store.put_if_absent(
                self._layout.schedule(schedule.name), _marker(schedule, tick, first=True)
            )

    async def _advance_marker(
        self, schedule: Schedule, tick: float, submitted: float | None
    ) -> None:
        """Move the marker forward to ``tick`` unless another process moved it
        further (``submitted``: ``tick``, when this process submitted its run)."""
        key = self._layout.schedule(schedule.name)
        for _ in range(MARKER_TRIES):
            found = await self._marker(schedule)
            if found is not None and not isinstance(found[1], str) and found[1] >= tick:
                return
            try:
                data = _marker(schedule, tick, submitted)
                if found is None:
                    await self._store.put_if_absent(key, data)
                else:
                    await self._store.put_if_match(key, data, found[0])
                return
            except PreconditionFailed:  # AlreadyExists is one: someone moved it; look again
                continue

    async def _sleep_until(self, when: float) -> None:
        """Until the clock reaches ``when`` (a FakeClock's advance wakes this)."""
        while (left := when - self._clock.now()) > 0:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(left, 60.0))


def _marker(
    schedule: Schedule, tick: float, submitted: float | None = None, *, first: bool = False
) -> bytes:
    """The marker at ``tick``; ``submitted``: the tick whose run it submitted;
    ``first``: ``tick`` is where the schedule starts, not one of its ticks."""
    return Marker(
        tick=tick,
        name=schedule.name,
        spec=describe(schedule),
        missed=schedule.missed,
        next_tick=next(schedule.ticks_after(tick)).timestamp(),
        run=None if submitted is None else tick_run_id(schedule.name, submitted),
        first=first,
    ).encode()


def describe(schedule: Schedule) -> str:
    """``cron 0 9 * * * (Europe/Paris)`` or ``every 0:05:00``, for people."""
    zone = schedule.timezone if isinstance(schedule.timezone, str) else str(schedule.timezone)
    if schedule.cron is not None:
        return f"cron {schedule.cron} ({zone})"
    return f"every {schedule.every}"


def next_ticks(schedule: Schedule, after: float, count: int) -> list[datetime]:
    ticks = schedule.ticks_after(after)
    return [next(ticks) for _ in range(count)]
