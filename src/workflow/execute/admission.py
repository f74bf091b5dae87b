"""What an attempt asks before a run's code starts, and tells when it ends.

:meth:`Limits.admit` runs after the run's input is decoded and before its
code, and either lets the run in or suspends it (raises
:class:`~stepstone.runtime.suspension.Suspend`: the job goes back to the
queue, the attempt not counted, holding no worker):

1. **A slot of its concurrency key**, if the job gives one. A full key puts
   the run in line (``waiting_for_slot``) until a holder's release wakes it.
   A slot is renewed with the job's lease (``Lease.also_renew``, at every
   heartbeat) and held a lease past it: the renewal goes out after the
   lease's, and on a store that takes one write a second to the key's
   object it waits for its turn (stepstone.store.s3.object_turns), so
   a slot held only as long as the lease would lapse under a live run,
   another run would take it, and the live one would lose its lease. A
   crashed holder's slot lapses a lease after its lease (at once for the
   run's own next claim, which takes its entry over); it is released when
   the code ends, however it ends (:meth:`Admitted.leave`).
2. **Its start under its type's rate limit**, if the type has one, once per
   attempt. A start still to come is recorded as a memo of the run
   (``!rate.<attempt>``) and the run suspends until it (``rate_limited``),
   keeping its slot meanwhile (carried to a lease past the start), so it
   starts then without asking again and without queueing for its key
   twice. A start taken at once is recorded only if the run suspends later in
   the attempt (:meth:`Admitted.suspending`): a sleep does not cost a second
   start.

Whoever frees a slot (a release, a lapsed holder dropped, a run that ended
without its code running) wakes the runs next in line
(:class:`~stepstone.runtime.capabilities.Waking`); a wake that finds no job
gives the place to the next. A queue that cannot wake (SQS) leaves waiting
runs to look again every ``wait_recheck`` seconds.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import ValidationError

from stepstone.errors import PayloadUnreadable
from stepstone.execute.memos import Memo
from stepstone.execute.scope import AttemptScope
from stepstone.job import Job
from stepstone.limits import rate, slots
from stepstone.limits.shared import KeptObjects, SharedObject
from stepstone.records.codec import codec_for_type
from stepstone.records.envelope import Envelope
from stepstone.records.layout import Layout, limit_digest
from stepstone.records.payloads import Payloads
from stepstone.runtime.capabilities import Waking
from stepstone.runtime.clock import Clock
from stepstone.runtime.errors import MalformedPayload
from stepstone.runtime.queue import Delivery
from stepstone.runtime.status import JobStatus, Wait
from stepstone.runtime.suspension import Suspend
from stepstone.store import ObjectStore

log = logging.getLogger("stepstone")

S = TypeVar("S")

_FLOAT = codec_for_type(float)

Decide = Callable[[slots.SlotTable | None, float], slots.SlotDecision]
"""A slot decision about a key's table (None: no one holds or waits), at a time."""
_Decided = tuple[slots.SlotTable | None, slots.SlotDecision]


class Limits:
    """The concurrency keys and rate limits of one runner's job types.

    ``waking`` is the queue when it can wake a suspended job, else None;
    ``wait_recheck`` bounds a wait for a slot (the safety net for a lost
    wake; the first run in line looks again after ``grace``); ``grace`` is
    how long a woken run has to come before it is woken again, and how long
    past its rate limit start a run keeps its slot (the lease).
    """

    def __init__(
        self,
        *,
        store: ObjectStore,
        layout: Layout,
        clock: Clock,
        waking: Waking | None,
        wait_recheck: float,
        grace: float,
        payloads: Payloads | None = None,
    ) -> None:
        self.grace = grace
        self._payloads = payloads if payloads is not None else Payloads()
        self._layout = layout
        self._clock = clock
        self._waking = waking
        self._wait_recheck = wait_recheck
        self._job_types: dict[str, type[Job[Any]]] = {}
        self._slots: KeptObjects[slots.SlotTable] = KeptObjects(
            lambda key: SharedObject(
                store, key, clock, to_fields=slots.to_fields, from_fields=slots.from_fields
            )
        )
        self._rates: KeptObjects[rate.RateState] = KeptObjects(
            lambda key: SharedObject(
                store,
                key,
                clock,
                to_fields=rate.to_fields,
                from_fields=rate.from_fields,
                repairable=True,
            )
        )

    def register(self, job_type: type[Job[Any]]) -> None:
        """Check the type's limits, and know its NAME (see :meth:`abandoned`)."""
        limit = job_type.concurrency_limit
        if not isinstance(limit, int) or limit < 1:
            raise ValueError(
                f"{job_type.__qualname__}.concurrency_limit must be an int >= 1, got {limit!r}"
            )
        if job_type.rate_limit is not None and not isinstance(job_type.rate_limit, rate.RateLimit):
            raise TypeError(
                f"{job_type.__qualname__}.rate_limit must be a RateLimit or None, "
                f"got {job_type.rate_limit!r}"
            )
        self._job_types[job_type.NAME] = job_type

    async def admit(self, job_type: type[Job[Any]], job: Job[Any], run: AttemptScope) -> Admitted:
        """Let the run in, holding a slot of its key and its rate limit start; or
        raise Suspend when it must wait for them (see the module docstring)."""
        admitted = Admitted()
        key = _checked(job.concurrency_key(), job_type, "concurrency_key")
        if key is not None:
            admitted.slot = await self._take_slot(job_type, key, run)
        if job_type.rate_limit is None:
            return admitted
        try:
            await self._take_start(job_type, job_type.rate_limit, job, run, admitted)
        except Suspend as suspend:
            if admitted.slot is not None:
                await admitted.slot.keep_until(suspend.until + self.grace)
            raise
        except BaseException:
            await admitted.leave()
            raise
        return admitted

    async def abandoned(self, delivery: Delivery) -> None:
        """The run ended without its code running in this claim (its lease
        lapsed on the last attempt): drop the slot an earlier claim of it may
        hold, and wake the next in line."""
        try:
            envelope = Envelope.decode(delivery.payload)
            job_type = self._job_types.get(envelope.kind)
            if job_type is None:
                return
            job_input = self._payloads.open_bytes(envelope.input)
            key = job_type.model_validate_json(job_input).concurrency_key()
        except (MalformedPayload, ValidationError, PayloadUnreadable):
            return
        if key is None:
            return
        table = self._slots(self._layout.slots(limit_digest(job_type.NAME, key)))
        try:
            await self.decide(table, self._forget(delivery.id))
        except Exception as exc:
            log.warning("run %s: freeing its concurrency slot failed: %s", delivery.id, exc)

    async def decide(
        self, table: SharedObject[slots.SlotTable], decide: Decide
    ) -> slots.SlotDecision:
        """Apply ``decide`` to a key's table, then wake the runs it names."""

        def change(state: slots.SlotTable | None, now: float) -> _Decided:
            wrong = slots.implausible(state, now, self.grace)
            if wrong:
                log.warning(
                    "concurrency slots %s: %s could not be real; repaired",
                    table.key,
                    "; ".join(wrong[:3]),
                )
            decision = decide(state, now)
            return decision.table, decision

        decision = await table.update(change)
        if decision.wake and self._waking is not None:
            await self._wake(table, self._waking, decision.wake)
        return decision

    async def _wake(
        self, table: SharedObject[slots.SlotTable], waking: Waking, runs: tuple[str, ...]
    ) -> None:
        """Wake ``runs``: a slot has come free for them. A run whose job is
        gone gives its place to the next. A wake that fails is logged: the run
        is woken again by the next change of the key after ``grace``, or looks
        again by itself after ``wait_recheck``."""
        for run_id in runs:
            try:
                if await waking.wake(run_id, JobStatus.WAITING_FOR_SLOT):
                    continue
            except Exception as exc:
                log.warning("run %s: waking it for its slot failed: %s", run_id, exc)
                continue
            await self.decide(table, self._forget(run_id))

    def _recheck(self, ahead: int) -> float:
        """When a run waiting ``ahead`` of others in line looks again by itself.

        The first in line looks again after ``grace`` (a lease): a wake lost
        with the holder that freed the slot (killed between its release and
        the wake), or a holder that died holding it (its slot lapses a lease
        after its lease), leaves a free slot that no one else would tell it of. Its look
        takes the slot and wakes whoever is next, so one run a full key
        looking again each lease is enough; the rest wait for the line to move.
        """
        return min(self.grace, self._wait_recheck) if ahead == 0 else self._wait_recheck

    def _forget(self, run_id: str) -> Decide:
        grace = self.grace
        return lambda state, now: slots.forget(state, run=run_id, now=now, grace=grace)

    async def _take_slot(self, job_type: type[Job[Any]], key: str, run: AttemptScope) -> HeldSlot:
        table = self._slots(self._layout.slots(limit_digest(job_type.NAME, key)))
        lease = run.attempt.lease
        token = secrets.token_hex(8)
        grace = self.grace

        def acquire(state: slots.SlotTable | None, now: float) -> slots.SlotDecision:
            return slots.acquire(
                state,
                job=job_type.NAME,
                key=key,
                limit=job_type.concurrency_limit,
                run=run.run_id,
                token=token,
                until=lease.expires_at + grace,
                now=now,
                grace=grace,
            )

        decision = await self.decide(table, acquire)
        if not decision.held:
            shown = key if len(key) <= 60 else key[:57] + "..."
            wait = Wait(JobStatus.WAITING_FOR_SLOT, f"key {shown!r}, {decision.ahead} ahead")
            raise Suspend(self._clock.now() + self._recheck(decision.ahead), wait)
        held = HeldSlot(self, table, run.run_id, token)
        held.stop_renewing = lease.also_renew(held.renew)
        return held

    async def _take_start(
        self,
        job_type: type[Job[Any]],
        limit: rate.RateLimit,
        job: Job[Any],
        run: AttemptScope,
        admitted: Admitted,
    ) -> None:
        memo = Memo(
            run, str(run.attempt.delivery.attempt), _FLOAT, internal="rate", positioned=False
        )
        found, start = await memo.lookup()
        if found and not _real_start(start, self._clock.now(), limit):
            log.warning(
                "run %s: its rate limit start %r could not be real: asking again", run.run_id, start
            )
            found = False
        if not found:
            rate_key = _checked(job.rate_limit_key(), job_type, "rate_limit_key")
            state = self._rates(self._layout.rate(limit_digest(job_type.NAME, rate_key)))

            def reserve(current: rate.RateState | None, now: float) -> tuple[rate.RateState, float]:
                if current is not None and not rate.real(current, limit, now):
                    log.warning(
                        "rate limit state %s held a time that could not be real (tat=%r): "
                        "started afresh from now",
                        state.key,
                        current.tat,
                    )
                return rate.reserve(current, job=job_type.NAME, key=rate_key, limit=limit, now=now)

            start = await state.update(reserve)
            if start <= self._clock.now():
                admitted.unrecorded_start = (memo, start)
                return
            start = await memo.record(start)
        if start > self._clock.now():
            when = datetime.fromtimestamp(start, UTC).isoformat(timespec="milliseconds")
            raise Suspend(start, Wait(JobStatus.RATE_LIMITED, f"rate limited until {when}"))


def _real_start(start: object, now: float, limit: rate.RateLimit) -> bool:
    """Whether a recorded start is a time its limit could have given."""
    return isinstance(start, float) and rate.real(rate.RateState("", None, start), limit, now)


def _checked(key: object, job_type: type[Job[Any]], method: str) -> str | None:
    if key is None or isinstance(key, str):
        return key
    raise TypeError(f"{job_type.__qualname__}.{method}() must return a str or None, not {key!r}")


class HeldSlot:
    """A slot a run holds: renewed with its lease until released."""

    def __init__(
        self, limits: Limits, table: SharedObject[slots.SlotTable], run: str, token: str
    ) -> None:
        self.limits = limits
        self.table = table
        self.run = run
        self.token = token
        self.stop_renewing: Callable[[], None] = lambda: None

    async def renew(self, expires_at: float) -> bool:
        """Carry the slot to a lease past the lease's ``expires_at`` (module
        docstring); False if it was taken over."""
        return await self._carry(expires_at + self.limits.grace)

    async def _carry(self, until: float) -> bool:
        run, token, grace = self.run, self.token, self.limits.grace
        decision = await self.limits.decide(
            self.table,
            lambda state, now: slots.renew(
                state, run=run, token=token, until=until, now=now, grace=grace
            ),
        )
        return decision.held

    async def keep_until(self, until: float) -> None:
        """Keep the slot, unrenewed, until ``until``: the run suspends for its
        rate limit start, and its next claim takes the slot over."""
        self.stop_renewing()
        await self._carry(until)

    async def release(self) -> None:
        self.stop_renewing()
        run, token, grace = self.run, self.token, self.limits.grace
        await self.limits.decide(
            self.table,
            lambda state, now: slots.release(state, run=run, token=token, now=now, grace=grace),
        )


class Admitted:
    """A run let in: what to tell the limits as its code suspends or ends."""

    def __init__(self) -> None:
        self.slot: HeldSlot | None = None
        self.unrecorded_start: tuple[Memo, float] | None = None
        """A rate limit start taken at once: recorded only if the run suspends."""

    async def suspending(self) -> None:
        """The run suspends: record its rate limit start, so that it does not take
        another when it comes back in this attempt."""
        if self.unrecorded_start is not None:
            memo, start = self.unrecorded_start
            self.unrecorded_start = None
            await memo.record(start)

    async def leave(self) -> None:
        """The run's code has ended (or suspended): release its slot. A
        failure is logged, not raised: the slot lapses a lease after the lease."""
        slot, self.slot = self.slot, None
        if slot is None:
            return
        try:
            await slot.release()
        except Exception as exc:
            log.warning(
                "run %s: releasing its concurrency slot failed "
                "(it frees when its lease lapses): %s",
                slot.run,
                exc,
            )
