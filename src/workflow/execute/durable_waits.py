"""Durable waits: sleep, events and children, holding no worker.

A run that must wait gives back its place in the worker and its lease: it raises
:class:`~stepstone.runtime.suspension.Suspend`, and the worker hands the job
back to the queue, the attempt not counted, due again at its wake time. When
it is claimed again, its recorded steps replay and the run comes back to the
wait, which now finds what it waited for (or its time up) and goes on.

Every wait records what it decided as a memo of the run (:mod:`stepstone.execute.memos`),
so a replay decides the same:

- a sleep records its wake time the first time through (``!sleep@n``): a
  replay sleeps until the same moment, not again from the start;
- a wait for an event records its deadline (``!deadline.<name>@n``) and the
  event it took, or that it timed out (``!event.<name>@n``): a replay sees
  the same payload, and a run takes each event once (waits for one name
  made at once decide one at a time: ``AttemptScope.event_lock``);
- awaiting children records nothing: their outcome records are the answer,
  and the wait names the children still running, so that only the last of
  them (or one that fails) wakes the run.

What it waits for may happen while the run is still running, between its
look and its suspension. Whoever makes it happen writes first (the event,
the child's outcome) and then wakes the run
(:class:`~stepstone.runtime.capabilities.Waking`); a wake that finds the run
still held marks it, and its suspension then makes it due at once. A queue
that cannot wake (SQS) makes waiting runs look again every ``wait_recheck``
seconds instead.
"""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from stepstone.errors import BadEvent, InvalidWait, PayloadUnreadable
from stepstone.execute.memos import Memo
from stepstone.execute.scope import AttemptScope
from stepstone.handles.handle import JobHandle
from stepstone.records.calls import PositionedMemo, memo_value
from stepstone.records.codec import codec_for_type, unpack_stored
from stepstone.records.layout import place_of
from stepstone.records.outcome import Outcome
from stepstone.records.payloads import unreadable
from stepstone.runtime import plausible
from stepstone.runtime.status import JobStatus, Wait
from stepstone.runtime.suspension import Suspend

RECHECK_WAKING = 3600.0
"""Longest a waiting run stays suspended on a queue that wakes it: a safety
net for a wake that was lost (its sender crashed between writing and waking)."""
RECHECK_POLLING = 30.0
"""Longest a waiting run stays suspended on a queue that cannot wake it (SQS):
how late it may see an event or a child's end."""

LATEST_WAKE = plausible.LATEST_DUE
"""The last wake time a durable wait takes (the end of year 9999, the last
a datetime holds, the latest a job may be due): a sleep or event timeout
past it is refused at the call."""

_FLOAT = codec_for_type(float)
_ANY = codec_for_type(Any)


def wait_recheck_for(wakes: bool, given: float | None) -> float:
    """Longest a waiting run stays suspended before it looks again: ``given``,
    else the default for a queue that wakes runs (``wakes``) or cannot."""
    if given is not None:
        return given
    return RECHECK_WAKING if wakes else RECHECK_POLLING


async def _recorded(memo: Memo, value: object) -> Any:
    """The memo's value: the recorded one on a replay, else ``value``, recorded."""
    found, recorded = await memo.lookup()
    if found:
        return recorded
    return await memo.record(value)


def seconds_to_wait(what: str, seconds: object) -> float:
    """``seconds`` as a duration a wait can keep; InvalidWait, at the call,
    for one that is negative, NaN or infinite."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidWait(f"{what} takes a number of seconds, got {seconds!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidWait(f"{what} takes a finite number of seconds >= 0, got {seconds!r}")
    return float(seconds)


def wake_time(what: str, when: float) -> float:
    """``when`` if the engine can keep it as a wake time; InvalidWait naming
    the limit (:data:`LATEST_WAKE`) if it is past it."""
    if when > LATEST_WAKE:
        raise InvalidWait(
            f"{what} would end past the last wake time a wait can keep, 9999-12-31T23:59:59Z"
        )
    return when


async def sleep_until(run: AttemptScope, wake_at: float) -> None:
    """Return once the clock reaches the wake time this sleep recorded first
    (``wake_at`` the first time through); until then, suspend the run."""
    wake_time("the sleep", wake_at)
    wake_at = await _recorded(Memo(run, "", _FLOAT, internal="sleep"), wake_at)
    if run.clock.now() >= wake_at:
        return
    when = datetime.fromtimestamp(wake_at, UTC).isoformat(timespec="seconds")
    raise run.suspend(Suspend(wake_at, Wait(JobStatus.SLEEPING, f"until {when}")))


async def wait_for_event(
    run: AttemptScope,
    name: str,
    timeout: float | None,  # noqa: ASYNC109 - a durable timeout, not a cancellation
    output: Any,
) -> Any:
    """The payload of the next event ``name`` this run has not taken, typed as
    ``output``; None once ``timeout`` seconds (from the first time through)
    have passed without one. Suspends the run until either."""
    # Both memos are made on every call, so each call of this wait has the
    # same numbers in every replay, whichever of them it ends up reading.
    taken = Memo(run, name, _ANY, internal="event")
    limit = Memo(run, name, _FLOAT, internal="deadline")
    async with run.event_lock(name):  # (concurrent waits for one name: see event_lock)
        run.check_going()  # (another wait for the name suspended the run meanwhile)
        found, recorded = await taken.lookup()
        deadline = math.inf
        if not found and timeout is not None:
            deadline = await _recorded(limit, run.clock.now() + timeout)
        if not found:
            recorded = await _take_event(run, name, taken, deadline)
        if recorded is not None:
            run.consumed_events.add(recorded["key"])
    if recorded is None:
        return None
    try:
        data = run.records.payloads.open(recorded["data"])
    except PayloadUnreadable as exc:
        raise unreadable(exc, f"run {run.run_id}: event {name!r} ({recorded['key']})") from None
    try:
        return codec_for_type(output).decode(data)
    except Exception as exc:  # any error: the event is not of its type
        raise BadEvent(run.run_id, name, recorded["key"], reason_of(exc)) from exc


def reason_of(exc: Exception) -> str:
    """What is wrong with a value a wait took (an event's payload, a
    callback's completion), its fields named (pydantic's errors, each with
    its place in the value)."""
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'the payload'}: {error['msg']}"
            for error in exc.errors()
        )
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _take_event(run: AttemptScope, name: str, taken: Memo, deadline: float) -> Any:
    """Take the oldest event ``name`` this run has not taken (recording which),
    record a timeout past ``deadline``, or suspend."""
    prefix = run.layout.events(run.run_id, run.incarnation, name)
    keys = sorted([info.key async for info in run.store.scan(prefix)])
    if keys:
        taken_before = run.consumed_events | await _taken_by_waits_to_come(run)
        for key in keys:
            if key not in taken_before:
                data = (await run.store.get(key)).data
                # First writer wins: a zombie of this run that took another event
                # first makes this wait see that one, as every replay will.
                return await taken.record({"key": key, "data": data})
    now = run.clock.now()
    if now >= deadline:
        return await taken.record(None)
    until = min(deadline, now + run.wait_recheck)
    raise run.suspend(Suspend(until, Wait(JobStatus.WAITING_FOR_EVENT, name)))


async def _taken_by_waits_to_come(run: AttemptScope) -> set[str]:
    """The events taken by the recorded waits of the run that this attempt
    has not come to yet: in a run whose branches run concurrently, a wait
    may come before another that took an event in an earlier attempt, and
    must not take that one. (Read once a memo an attempt; in a run whose
    calls follow one another, there are none when a wait takes an event.)"""
    if run.memo_keys is None:
        return set()
    to_come = [s for s in run.memo_keys if s not in run.made and place_of(s) is not None]
    unread = [segment for segment in to_come if segment not in run.recorded_takes]

    async def read(segment: str) -> None:
        key = run.layout.memo(run.run_id, run.incarnation, segment)
        field = memo_value(run.records.payloads)
        try:
            memo = PositionedMemo.read_split(await run.store.get_split(key, field), field)
            recorded = unpack_stored(memo.value) if memo.call.call == "event" else None
        except Exception:  # (unreadable: the wait that reads it says what is wrong)
            recorded = None
        took = recorded.get("key") if isinstance(recorded, dict) else None
        run.recorded_takes[segment] = took if isinstance(took, str) else None

    await asyncio.gather(*(read(segment) for segment in unread))
    return {key for s in to_come if (key := run.recorded_takes.get(s)) is not None}


async def children(run: AttemptScope, handles: tuple[JobHandle[Any], ...]) -> list[Outcome[Any]]:
    """The outcomes of ``handles`` (this run's children), in order, once the
    wait is over: every child has ended, or one has not succeeded and every
    child before it has ended. Then the list stops at that one, whose
    failure the caller raises (``Outcome.unwrap``): the first failure in
    order, the same on every replay, as the children's outcomes are final.

    Until then the run suspends, its wait naming the children still
    running (``Wait.pending``): one that ends successfully only takes
    itself off, and the last to end wakes the run, so a parent of N children
    resumes once, not once per child; one that fails wakes it at once (the
    wait may be over)."""
    outcomes = [await handle.poll() for handle in handles]
    for n, outcome in enumerate(outcomes):
        if outcome is None:
            break
        if not outcome.ok:
            return [o for o in outcomes[: n + 1] if o is not None]
    else:
        return [outcome for outcome in outcomes if outcome is not None]
    running = (handle.id for handle, o in zip(handles, outcomes, strict=True) if o is None)
    pending = tuple(dict.fromkeys(running))
    wait = Wait(JobStatus.WAITING_FOR_CHILDREN, f"of {len(handles)} children", pending=pending)
    raise run.suspend(Suspend(run.clock.now() + run.wait_recheck, wait))
