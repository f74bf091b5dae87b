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

Ticks missed while no worker ran are caught up only within
``catch_up_window`` of now, when one is given: older ones are skipped.

What a tick does while the run the schedule started last is live is its
``overlap=`` policy (:mod:`stepstone.schedule_overlap`). Under every policy
but ``"allow_all"`` each look decides before it acts: the decision (which
tick starts, which wait, which are skipped and why, which run is cancelled)
is compare-and-swapped into the marker, and only the process whose write
lands starts the run, so two processes never decide a tick two ways. A start
is written ``pending`` and cleared once submitted; a process that reads a
pending start (its decider died between the two) submits it, under the same
run id, before deciding anything else. Whether the last run is live is one
HEAD of its outcome; while ticks wait behind it, the processes look every
:data:`BUFFER_LOOK` seconds. Under ``"allow_all"`` the ticks' runs are
submitted first and the marker moved after, as a schedule always did.

A schedule is paused in its marker (``stepstone schedules pause``,
:meth:`Scheduler.pause`), so every process carrying it obeys: a tick that
comes while it is paused is skipped, the marker saying so, and the ticks of
a pause are not caught up when it is resumed. A backfill
(:meth:`Scheduler.backfill`) submits the run of each past tick of a range
that has none, under the tick's own run id: a tick the scheduler ran, or an
earlier backfill did, is not run again.

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
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, Literal, get_args
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from stepstone.errors import ScheduleRefused
from stepstone.job import Job
from stepstone.records.layout import Layout, name_key
from stepstone.records.schedule_marker import LONGEST_NOTE, Marker, decode_marker, tick_run_id
from stepstone.runtime.clock import Clock, subscribe
from stepstone.schedule_overlap import Decision, Overlap, decide
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
BUFFER_LOOK = 1.0
"""Seconds between a process's looks at whether the run that buffered ticks
wait for has ended (one HEAD of its outcome, and a GET of the marker)."""
MAX_BACKFILL = 1000
"""Ticks one backfill submits at most: a longer range is refused."""
BACKFILL_AT_ONCE = 16
"""Ticks a backfill submits at once."""
SKIPS_LOGGED = 10
"""Skipped ticks one look logs at most (the newest; the marker keeps the last)."""


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
    overlap: Overlap = "allow_all"
    """What a tick does while the run the schedule started last is live:
    ``"allow_all"``, ``"skip"``, ``"buffer_one"``, ``"buffer_all"`` or
    ``"cancel_other"`` (:mod:`stepstone.schedule_overlap`)."""
    catch_up_window: timedelta | None = None
    """How far back a tick missed while no worker ran may still be caught
    up (as ``missed`` says); older ones are skipped. None: as far as
    MAX_CATCH_UP ticks go."""
    _zone: tzinfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        name_key(self.name)  # a usable key segment, or a clear error
        if (self.cron is None) == (self.every is None):
            raise ValueError(f"schedule {self.name!r}: give exactly one of cron= or every=")
        if self.every is not None and self.every.total_seconds() <= 0:
            raise ValueError(f"schedule {self.name!r}: every= must be positive")
        if self.missed not in ("latest", "all", "skip"):
            raise ValueError(f"schedule {self.name!r}: missed= is 'latest', 'all' or 'skip'")
        if self.overlap not in get_args(Overlap):
            raise ValueError(
                f"schedule {self.name!r}: overlap= is one of {', '.join(get_args(Overlap))}"
            )
        if self.catch_up_window is not None and self.catch_up_window.total_seconds() <= 0:
            raise ValueError(f"schedule {self.name!r}: catch_up_window= must be positive")
        if self.anchor.tzinfo is None:
            raise ValueError(f"schedule {self.name!r}: anchor must be an aware datetime")
        zone = ZoneInfo(self.timezone) if isinstance(self.timezone, str) else self.timezone
        object.__setattr__(self, "_zone", zone)
        if self.cron is not None:
            try:
                CronSim(self.cron, datetime.now(zone))
            except CronSimError as exc:
                raise ValueError(f"schedule {self.name!r}: bad cron {self.cron!r}: {exc}") from None

    @property
    def zone(self) -> tzinfo:
        """The time zone its ticks are given in."""
        return self._zone

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


@dataclass(frozen=True, slots=True)
class Backfilled:
    """What a backfill did, tick by tick (oldest first): the ticks whose runs
    it submitted, and those whose run was there already (the scheduler ran
    it, or an earlier backfill did), each with its run id."""

    submitted: list[tuple[datetime, str]]
    existing: list[tuple[datetime, str]]


class Scheduler:
    """Submits the ticks of ``schedules`` while a worker runs (see the module
    docstring); pauses, resumes and backfills a schedule for operators.
    ``cancel`` cancels a run (``cancel_other``); ``look``: seconds between
    looks at whether the run a buffered tick waits for has ended."""

    def __init__(
        self,
        schedules: list[Schedule],
        *,
        submitter: Submitter,
        store: ObjectStore,
        layout: Layout,
        clock: Clock,
        cancel: Callable[[str], Awaitable[bool]],
        look: float = BUFFER_LOOK,
    ) -> None:
        names = [schedule.name for schedule in schedules]
        if len(set(names)) != len(names):
            raise ValueError(f"two schedules share a name: {sorted(names)}")
        self.schedules = schedules
        self._by_name = {schedule.name: schedule for schedule in schedules}
        self._submitter = submitter
        self._store = store
        self._layout = layout
        self._clock = clock
        self._cancel = cancel
        self._look = look
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
        found = await self._marker(schedule.name)
        if found is None:
            return None
        if isinstance(found[1], str):
            log.warning("schedule %r: %s", schedule.name, found[1])
            return None
        return found[1].tick

    async def marker(self, name: str) -> Marker | None:
        """Schedule ``name``'s marker as it stands (None: it has none, or it
        cannot be used: a worker carrying it repairs it)."""
        found = await self._marker(name)
        return None if found is None or isinstance(found[1], str) else found[1]

    # -- operators' actions ----------------------------------------------------

    async def pause(self, name: str, *, note: str | None = None, by: str | None = None) -> bool:
        """Pause schedule ``name`` in the store, for every process carrying
        it: its ticks from now on are skipped, with ``note`` (printable text,
        up to 500 characters) shown as why and ``by`` as who. False if it
        was paused already (the note and who are replaced). Raises
        ScheduleRefused, saying why, when it cannot be."""
        now = self._clock.now()
        shown_note = _text(note, "the note")
        shown_by = _text(by, "who paused it")
        before = await self._change(
            name,
            lambda m: replace(m, paused=True, paused_at=now, paused_by=shown_by, note=shown_note),
        )
        return not before.paused

    async def resume(self, name: str) -> bool:
        """Resume schedule ``name``: its next tick runs; the ticks that came
        while it was paused do not. False if it was not paused."""
        now = self._clock.now()
        before = await self._change(
            name, lambda m: replace(m, paused=False, resumed_at=now) if m.paused else m
        )
        return before.paused

    async def backfill(self, name: str, start: datetime, end: datetime) -> Backfilled:
        """Submit the run of each tick of schedule ``name`` from ``start`` to
        ``end`` (both included, both past) that has no run yet: a tick the
        scheduler ran, or an earlier backfill, is not run again (its run id
        is the tick's), so a backfill done twice submits nothing more. The
        ticks run whatever the overlap policy and whether the schedule is
        paused. Raises ScheduleRefused when the application does not define
        the schedule (the job of a tick is made by its definition), the range
        is not past or holds more than MAX_BACKFILL ticks."""
        schedule = self._by_name.get(name)
        if schedule is None:
            raise ScheduleRefused(
                f"schedule {name!r} is not defined by this application: a backfill makes "
                "each tick's job from the schedule's definition (give the runner that carries it)"
            )
        if start.tzinfo is None or end.tzinfo is None:
            raise ScheduleRefused("a backfill's start and end must be aware datetimes")
        if end < start:
            raise ScheduleRefused(f"a backfill's end ({end.isoformat()}) is before its start")
        now = self._clock.now()
        if end.timestamp() > now:
            raise ScheduleRefused(
                f"a backfill's end ({end.isoformat()}) is still to come: "
                "ticks to come are the scheduler's"
            )
        ticks: list[datetime] = []
        for tick in schedule.ticks_after(start.timestamp() - 1e-6):
            if tick > end:
                break
            if len(ticks) == MAX_BACKFILL:
                raise ScheduleRefused(
                    f"schedule {name!r} has more than {MAX_BACKFILL} ticks from "
                    f"{start.isoformat()} to {end.isoformat()}: backfill a shorter range at a time"
                )
            ticks.append(tick)
        room = asyncio.Semaphore(BACKFILL_AT_ONCE)

        async def one(tick: datetime) -> tuple[datetime, str, bool]:
            run_id = schedule.run_id(tick)
            async with room:
                if not await self._live(run_id):  # ended (or swept, its tombstone kept)
                    return tick, run_id, False
                handle = await self._submitter.submit(schedule.job(tick), run_id=run_id)
                return tick, run_id, handle.newly_submitted

        done = await asyncio.gather(*(one(tick) for tick in ticks))
        log.info("schedule %r: backfilled %d tick(s)", name, sum(new for _, _, new in done))
        return Backfilled(
            [(tick, run_id) for tick, run_id, new in done if new],
            [(tick, run_id) for tick, run_id, new in done if not new],
        )

    async def _change(self, name: str, change: Callable[[Marker], Marker]) -> Marker:
        """Write ``change(marker)`` in place of schedule ``name``'s marker,
        compare-and-swapped; returns the marker it changed. A schedule with
        no marker that this application defines gets one, as if first seen."""
        key = self._layout.schedule(name)
        schedule = self._by_name.get(name)
        for _ in range(MARKER_TRIES * 4):  # (the workers write it too, at each tick)
            now = self._clock.now()
            found = await self._marker(name)
            if found is None:
                if schedule is None:
                    raise ScheduleRefused(
                        f"no schedule {name!r} in {self._store.location}: no worker has "
                        "carried it yet, and this application does not define it"
                    )
                marker = _fresh(schedule, now - SCHEDULE_CLOCK_SKEW)
                with contextlib.suppress(AlreadyExists):
                    await self._store.put_if_absent(key, change(marker).encode())
                    return marker
                continue
            etag, marker_or_why = found
            if isinstance(marker_or_why, str):
                raise ScheduleRefused(
                    f"schedule {name!r}: {marker_or_why}; a worker carrying it repairs it"
                )
            changed = change(marker_or_why)
            if changed == marker_or_why:
                return marker_or_why
            with contextlib.suppress(PreconditionFailed, NotFound):
                await self._store.put_if_match(key, changed.encode(), etag)
                return marker_or_why
        raise ScheduleRefused(f"schedule {name!r}: its marker kept changing; try again")

    # -- the ticks -------------------------------------------------------------

    async def _loop(self, schedule: Schedule) -> None:
        up_since = self._clock.now()
        while True:
            try:
                wake = await self._submit_due(schedule, up_since)
            except Exception as exc:
                log.warning(
                    "schedule %r: ticks not submitted (will try again): %s", schedule.name, exc
                )
                wake = next(schedule.ticks_after(self._clock.now())).timestamp()
            await self._sleep_until(wake)

    async def _submit_due(self, schedule: Schedule, up_since: float) -> float:
        """Decide and start the ticks due since the marker: every one after
        ``up_since`` (this process was up for it), those before as
        ``missed`` and ``catch_up_window`` say, each as ``overlap`` says.
        Returns when to look again: the tick after the marker's (a tick that
        came meanwhile is looked at at once), or sooner while ticks wait
        behind a live run."""

        def look(marker_tick: float, waiting: bool) -> float:
            wake = next(schedule.ticks_after(marker_tick)).timestamp()
            return min(wake, self._clock.now() + self._look) if waiting else wake

        for _ in range(MARKER_TRIES):
            now = self._clock.now()
            found = await self._marker(schedule.name)
            if found is None:
                # First seen: nothing before counts, by any clock within the bound.
                await self._create_marker(schedule, now - SCHEDULE_CLOCK_SKEW)
                return look(now - SCHEDULE_CLOCK_SKEW, False)
            etag, marker = found
            if isinstance(marker, str):
                await self._repair_marker(schedule, etag, marker, now - SCHEDULE_CLOCK_SKEW)
                return look(now - SCHEDULE_CLOCK_SKEW, False)
            self._warn_ahead(schedule, marker.tick, now)
            if marker.pending:
                await self._start(schedule, marker)  # decided, maybe cut short: one run
            due = schedule.ticks_between(marker.tick, now)
            if not due and not marker.pending and (marker.paused or not marker.buffered):
                return look(marker.tick, False)
            chosen, skipped = _chosen(schedule, marker, due, up_since, now)
            if marker.paused:
                decision = Decision(buffered=list(marker.buffered))
            elif schedule.overlap == "allow_all":
                decision = Decision(start=[*marker.buffered, *chosen])
                for tick in decision.start:  # submitted before the marker moves: none is lost
                    await self._submit(schedule, tick)
            else:
                live = (
                    marker.latest is not None
                    and bool(chosen or marker.buffered)
                    and await self._live(marker.latest)
                )
                decision = decide(
                    schedule.overlap,
                    live=live,
                    buffered=marker.buffered,
                    due=chosen,
                    shown={t: _when(schedule, t) for t in (*marker.buffered, *chosen)},
                )
            skipped = sorted(skipped + decision.skipped)
            changed = _decided(schedule, marker, due, decision, skipped)
            if changed == marker:
                return look(changed.tick, bool(changed.buffered))  # (their run is live)
            new_etag = await self._put(schedule.name, changed, etag)
            if new_etag is None:
                continue  # another process decided first: look again
            for tick, why in skipped[-SKIPS_LOGGED:]:
                log.info(
                    "schedule %r: skipped the tick of %s: %s",
                    schedule.name,
                    _when(schedule, tick),
                    why,
                )
            if changed.pending:
                await self._start(schedule, changed)
                started = replace(changed, pending=False, cancel=None)
                await self._put(schedule.name, started, new_etag)
            return look(changed.tick, bool(changed.buffered) and not changed.paused)
        return self._clock.now() + self._look  # the marker kept changing: look again soon

    async def _start(self, schedule: Schedule, marker: Marker) -> None:
        """Make the start ``marker`` decided (cancelling first the run it says): the
        same run id in whichever process makes it, so it is one run."""
        assert marker.latest_tick is not None and marker.latest is not None
        if marker.cancel is not None and await self._cancel(marker.cancel):
            log.info(
                "schedule %r: cancelled run %s (overlap cancel_other)", schedule.name, marker.cancel
            )
        await self._submit(schedule, marker.latest_tick)

    async def _submit(self, schedule: Schedule, tick: float) -> None:
        at = datetime.fromtimestamp(tick, schedule.zone)
        await self._submitter.submit(schedule.job(at), run_id=schedule.run_id(at))
        log.info("schedule %r: submitted the tick of %s", schedule.name, at.isoformat())

    async def _live(self, run_id: str) -> bool:
        """Whether run ``run_id`` has not ended: it has no outcome (a swept
        run's tombstone counts as one)."""
        try:
            await self._store.head(self._layout.outcome(run_id))
        except NotFound:
            return True
        return False

    def _warn_ahead(self, schedule: Schedule, tick: float, now: float) -> None:
        if tick > now + SCHEDULE_CLOCK_SKEW and schedule.name not in self._warned:
            self._warned.add(schedule.name)
            log.warning(
                "schedule %r: its marker (the last tick submitted) is %.1f s ahead of this "
                "process's clock; the clocks of the processes carrying it disagree by more "
                "than %.0f s, so ticks may run early, late or not at all: keep them in step (NTP)",
                schedule.name,
                tick - now,
                SCHEDULE_CLOCK_SKEW,
            )

    async def _marker(self, name: str) -> tuple[str, Marker | str] | None:
        """The marker's etag and content (None: there is none); in place of the
        marker, what is wrong with it when it does not decode or could not be real."""
        key = self._layout.schedule(name)
        try:
            stored = await self._store.get(key)
        except NotFound:
            return None
        try:
            return stored.etag, decode_marker(stored.data, now=self._clock.now())
        except Exception as exc:
            return stored.etag, f"its marker {key} cannot be used ({exc})"

    async def _put(self, name: str, marker: Marker, etag: str) -> str | None:
        """Write ``marker`` if the stored one is still ``etag``: its new etag, or None."""
        try:
            key = self._layout.schedule(name)
            return await self._store.put_if_match(key, marker.encode(), etag)
        except (PreconditionFailed, NotFound):
            return None

    async def _repair_marker(self, schedule: Schedule, etag: str, wrong: str, now: float) -> None:
        """Set a marker that cannot be used to ``now`` (see the module docstring;
        the caller's now, less the clocks' skew, as for a schedule first seen)."""
        log.warning("schedule %r: %s; set to now, as for a new schedule", schedule.name, wrong)
        await self._put(schedule.name, _fresh(schedule, now), etag)  # (None: someone else wrote it)

    async def _create_marker(self, schedule: Schedule, tick: float) -> None:
        with contextlib.suppress(AlreadyExists):
            await self._store.put_if_absent(
                self._layout.schedule(schedule.name), _fresh(schedule, tick).encode()
            )

    async def _sleep_until(self, when: float) -> None:
        """Until the clock reaches ``when`` (a FakeClock's advance wakes this)."""
        while (left := when - self._clock.now()) > 0:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(left, 60.0))


def _chosen(
    schedule: Schedule, marker: Marker, due: list[datetime], up_since: float, now: float
) -> tuple[list[float], list[tuple[float, str]]]:
    """The ticks of ``due`` to decide on, and those skipped before any
    overlap: while paused, or missed (before ``up_since``, by more than the
    clocks may disagree) and left out by ``missed`` or the catch-up window."""
    ticks = [tick.timestamp() for tick in due]
    missed = [tick for tick in ticks if tick <= up_since - SCHEDULE_CLOCK_SKEW]
    kept = {"latest": missed[-1:], "all": missed, "skip": []}[schedule.missed]
    window = schedule.catch_up_window
    oldest = -math.inf if window is None else now - window.total_seconds()
    chosen: list[float] = []
    skipped: list[tuple[float, str]] = []
    paused_from = -math.inf if marker.paused_at is None else marker.paused_at
    for tick in ticks:
        if marker.paused or paused_from <= tick <= (marker.resumed_at or -math.inf):
            skipped.append((tick, "the schedule was paused"))
        elif tick in missed and tick not in kept:
            skipped.append((tick, f"missed while no worker ran (missed={schedule.missed!r})"))
        elif tick in missed and tick < oldest:
            skipped.append((tick, f"missed, and older than the catch-up window ({window})"))
        else:
            chosen.append(tick)
    return chosen, skipped


def _decided(
    schedule: Schedule,
    marker: Marker,
    due: list[datetime],
    decision: Decision,
    skipped: list[tuple[float, str]],
) -> Marker:
    """The marker once ``decision`` is taken: past the ticks ``due``, the run
    started last, the start still to make (all but ``allow_all``), the ticks
    waiting, the last skip."""
    tick = due[-1].timestamp() if due else marker.tick
    last = decision.start[-1] if decision.start else None
    pending = last is not None and schedule.overlap != "allow_all"
    run = marker.run if not due else tick_run_id(schedule.name, tick) if last == tick else None
    return _described(
        schedule,
        replace(
            marker,
            tick=tick,
            first=marker.first and not due,
            run=run,
            latest=marker.latest if last is None else tick_run_id(schedule.name, last),
            latest_tick=marker.latest_tick if last is None else last,
            pending=pending,
            cancel=marker.latest if pending and decision.cancel_live else None,
            buffered=tuple(decision.buffered),
            skipped_tick=skipped[-1][0] if skipped else marker.skipped_tick,
            skipped_why=skipped[-1][1][:LONGEST_NOTE] if skipped else marker.skipped_why,
        ),
    )


def _fresh(schedule: Schedule, tick: float) -> Marker:
    """The marker of a schedule starting at ``tick`` (first seen, or repaired)."""
    return _described(schedule, Marker(tick=tick, first=True))


def _described(schedule: Schedule, marker: Marker) -> Marker:
    """``marker`` saying, for operators' tools, how ``schedule`` ticks now."""
    return replace(
        marker,
        name=schedule.name,
        spec=describe(schedule),
        missed=schedule.missed,
        overlap=schedule.overlap,
        next_tick=next(schedule.ticks_after(marker.tick)).timestamp(),
    )


def _when(schedule: Schedule, tick: float) -> str:
    return datetime.fromtimestamp(tick, schedule.zone).isoformat()


def _text(value: str | None, what: str) -> str | None:
    """``value`` as a marker keeps it: printable, at most LONGEST_NOTE characters."""
    if value is None or value == "":
        return None
    if not value.isprintable():
        raise ScheduleRefused(f"{what} must be printable text on one line")
    if len(value) > LONGEST_NOTE:
        raise ScheduleRefused(f"{what} is over {LONGEST_NOTE} characters")
    return value


def describe(schedule: Schedule) -> str:
    """``cron 0 9 * * * (Europe/Paris)`` or ``every 0:05:00``, for people."""
    zone = schedule.timezone if isinstance(schedule.timezone, str) else str(schedule.timezone)
    if schedule.cron is not None:
        return f"cron {schedule.cron} ({zone})"
    return f"every {schedule.every}"


def next_ticks(schedule: Schedule, after: float, count: int) -> list[datetime]:
    ticks = schedule.ticks_after(after)
    return [next(ticks) for _ in range(count)]
