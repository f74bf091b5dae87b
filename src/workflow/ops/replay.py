"""Replaying a run from a step: a new incarnation that keeps what came before.

A replay (``runner.replay``, ``stepstone replay``) starts a new incarnation
of a run that has ended (succeeded, failed, cancelled, or dead in the
queue) with the same input. The memos the run recorded before the step it
replays from are copied into the new incarnation, so those calls replay
from them, and everything from that step on runs again (the run's history
is in order, :mod:`stepstone.records.calls`, which is what makes "before"
exact). The events sent to the run are copied too: those the kept calls
took stay taken, and a wait after the step sees the others again, as the
run saw them; so are the records of what the waits of the callbacks kept
took (a callback after the step is made anew, with a new id). Streams
are not copied: the new incarnation's stream is written again, by the
kept writes as they replay and the rest as they run. The old
incarnation's memos
and attempt history stay where they are, and the new incarnation's envelope
and outcome name it (``replay_of``), so ``show`` links the two.

In order, so a replay cut short leaves a run that still makes sense: the
copies go under the new incarnation first (nothing reads them until it is
enqueued); then the claim the run ended in is kept in its history; then a
dead run's queue record is discarded and the new incarnation enqueued; then
the old outcome is removed. A worker that claims the new incarnation while
the old outcome still stands removes it itself, so once enqueued the replay
happens. A live run is refused: it is still making its own history.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from stepstone.errors import InspectError
from stepstone.ops.actions import Bulk, each
from stepstone.ops.reads import Inspected, bounded, check_id
from stepstone.records.attempt_log import keep_final_attempt
from stepstone.records.attributes import attributes_marked, drop_entries, write_entries
from stepstone.records.calls import (
    CALLBACK_TAKE_MEMO,
    OUTSIDE_HISTORY,
    PATCH_MEMO,
    Call,
    PositionedMemo,
)
from stepstone.records.codec import pack, unpack, unpack_stored
from stepstone.records.envelope import Envelope
from stepstone.records.large_values import write
from stepstone.records.layout import POSITION_MARK, fresh_incarnation, place_of
from stepstone.records.outcome import OutcomeRecord, decode_outcome_key
from stepstone.runtime.errors import MalformedPayload
from stepstone.runtime.queue import PRIORITY_NORMAL, JobRecord
from stepstone.runtime.status import JobStatus
from stepstone.store import NotFound, PreconditionFailed, StoredObject


@dataclass(frozen=True, slots=True)
class Replayed:
    """What a replay started: the run, its new incarnation, the one it
    replaces (whose memos and attempt history stay, linked), the step it
    runs from and that step's position (None: from the start), and how many
    memos and events it kept."""

    run_id: str
    incarnation: str
    replaced: str
    from_step: str | None
    position: int | None
    kept_memos: int
    kept_events: int


async def replay(runner: Inspected, run_id: str, *, from_step: str | None = None) -> Replayed:
    """Start a new incarnation of the ended run ``run_id`` that keeps its
    memos before the first call of step ``from_step`` (None: none, the run
    starts over) and runs from that step on; see the module docstring.

    Raises InspectError, saying why, for a run that is live (it has not
    ended), unknown, swept, whose input was not kept, that recorded no step
    of that name, or that was recorded before runs kept their positions
    (then only a replay from the start is possible)."""
    check_id(run_id)
    if from_step is not None and (not isinstance(from_step, str) or not from_step):
        raise InspectError("from_step names a step: a non-empty str")
    queued = await runner.queue.get(run_id)
    if queued is not None and queued.status is not JobStatus.DEAD:
        raise InspectError(
            f"run {run_id} is {queued.status.value}: a live run cannot be replayed "
            "(wait for it to end, or cancel it first)"
        )
    stored = await _outcome(runner, run_id)
    outcome = None if stored is None else _decoded(runner, run_id, stored)
    old = _ended_envelope(runner, run_id, queued, outcome)
    kept, position, decisions = await _kept_memos(runner, run_id, old.incarnation, from_step)
    new = Envelope(
        old.kind,
        old.input,
        fresh_incarnation(),
        old.input_hash,
        True,  # (so its first claim looks for the outcome it replaces)
        old.parent,
        version=old.version,
        key=old.key,
        replay_of=old.incarnation,
        from_step=from_step,
        # (the calls kept replay as they were numbered: by branch, or in the
        # order they started in a run recorded before branches existed)
        numbered=all(k.memo.numbered for k in kept),
        attributes=old.attributes,
    )
    layout, store = runner.layout, runner.store
    events = await _events(runner, run_id, old.incarnation)
    old_events = layout.events(run_id, old.incarnation)
    new_events = layout.events(run_id, new.incarnation)

    async def copy_memo(kept: Kept) -> None:
        key = layout.memo(run_id, new.incarnation, kept.segment)
        memo = kept.memo
        if memo.call.call == "event":  # the take names the event's copy
            memo = _moved_take(memo, old_events, new_events)
        await write(store, key, memo.encode(), if_absent=True)

    async def copy_event(event: StoredObject) -> None:
        await store.put_if_absent(new_events + event.key[len(old_events) :], event.data)

    async def copy_decision(segment: str, data: bytes) -> None:
        await store.put_if_absent(layout.memo(run_id, new.incarnation, segment), data)

    await bounded(
        [
            *(copy_memo(m) for m in kept),
            *(copy_event(e) for e in events),
            *(copy_decision(segment, data) for segment, data in decisions),
        ]
    )
    if outcome is not None:
        await keep_final_attempt(store, layout, outcome)
    # (found by its attributes before it can run: records.attributes)
    await write_entries(store, layout, [(run_id, new.incarnation, new.attributes)])
    if queued is not None and not await runner.queue.discard_dead(run_id):
        raise InspectError(f"run {run_id} is no longer dead; it was not replayed")
    enqueued = await runner.queue.enqueue(
        new.encode(),
        kind=new.kind,
        id=run_id,
        priority=PRIORITY_NORMAL if queued is None else queued.priority,
        max_attempts=None if queued is None else queued.max_attempts,
        headers=None if queued is None else queued.headers,
    )
    if not enqueued.created:
        raise InspectError(f"run {run_id} was submitted again meanwhile; it was not replayed")
    if stored is not None:
        with contextlib.suppress(PreconditionFailed, NotFound):  # (its worker removes it then)
            await store.delete(layout.outcome(run_id), if_match=stored.etag)
    # The index entries of the incarnation replaced name no run now.
    old_memos = [info.key async for info in store.scan(layout.memos(run_id, old.incarnation))]
    marked = attributes_marked(layout, run_id, old_memos)
    await drop_entries(store, layout, run_id, old.incarnation, {*old.attributes.items(), *marked})
    return Replayed(
        run_id, new.incarnation, old.incarnation, from_step, position, len(kept), len(events)
    )


async def _outcome(runner: Inspected, run_id: str) -> StoredObject | None:
    try:
        return await runner.store.get(runner.layout.outcome(run_id))
    except NotFound:
        return None


def _decoded(runner: Inspected, run_id: str, stored: StoredObject) -> OutcomeRecord | None:
    """The outcome record ``stored`` holds; None for a swept run's tombstone."""
    try:
        found = decode_outcome_key(stored.data)
    except ValueError as exc:
        raise InspectError(
            f"run {run_id}: its outcome {stored.key} cannot be read ({exc}); not replayed"
        ) from None
    return found if isinstance(found, OutcomeRecord) else None


def _ended_envelope(
    runner: Inspected, run_id: str, queued: JobRecord | None, outcome: OutcomeRecord | None
) -> Envelope:
    """The envelope the run ended with: a dead run's queue record holds it;
    a finished run's outcome keeps its input (when small enough)."""
    if queued is not None:
        try:
            return Envelope.decode(queued.payload)
        except MalformedPayload as exc:
            raise InspectError(f"run {run_id}: {exc}; not replayed") from None
    if outcome is None:
        raise InspectError(f"no run {run_id} in {runner.store.location} (or it was swept)")
    if outcome.input is None:
        why = (
            f"its input ({outcome.input_size} bytes) was too large to keep"
            if outcome.input_size
            else "it finished before stepstone kept inputs"
        )
        raise InspectError(f"run {run_id} cannot be replayed: {why}")
    return Envelope(
        outcome.kind,
        outcome.input,
        outcome.incarnation,
        outcome.input_hash,
        True,
        outcome.parent,
        version=outcome.version,
        key=outcome.key,
        attributes=outcome.attributes,
    )


async def _kept_memos(
    runner: Inspected, run_id: str, incarnation: str, from_step: str | None
) -> tuple[list[Kept], int | None, list[tuple[str, bytes]]]:
    """The memos of ``incarnation`` from before the first call of step
    ``from_step`` (by their key segments), that call's position, and the
    patch decisions made before it (``ctx.patched``), by key segment (none,
    None and none without a step).

    "Before" is by when each call began, which every memo says since runs
    number their calls by branch: a branch's calls that began before the
    step's are kept, whichever branch made them. A memo recorded before
    memos kept their times is placed by its position in the run."""
    if from_step is None:
        return [], None, []
    prefix = runner.layout.memos(run_id, incarnation)
    infos = [info async for info in runner.store.scan(prefix)]
    positioned = [info for info in infos if place_of(info.key[len(prefix) :]) is not None]
    by_name = [info for info in infos if place_of(info.key[len(prefix) :]) is None]
    history = [i for i in by_name if not i.key[len(prefix) :].startswith(OUTSIDE_HISTORY)]
    if history and not positioned:
        raise InspectError(
            f"run {run_id} was recorded before stepstone kept the order of a run's "
            "steps: it can be replayed from the start only (without a step)"
        )

    async def read(key: str) -> Kept:
        try:
            memo = PositionedMemo.decode((await runner.store.get(key)).data)
        except ValueError as exc:
            raise InspectError(f"run {run_id}: the memo {key} cannot be read ({exc})") from None
        return Kept(key[len(prefix) :], memo)

    memos = sorted(await bounded(read(info.key) for info in positioned), key=_at)
    wanted = Call("step", from_step)
    first = next((kept for kept in memos if kept.memo.call == wanted), None)
    if first is None:
        steps = list(dict.fromkeys(k.memo.call.name for k in memos if k.memo.call.call == "step"))
        shown = ", ".join(repr(name) for name in steps[:20]) or "none"
        raise InspectError(f"run {run_id} recorded no step {from_step!r} (its steps: {shown})")
    decisions = []
    for info in by_name:
        segment = info.key[len(prefix) :]
        if segment.startswith(PATCH_MEMO):
            data = (await runner.store.get(info.key)).data
            with contextlib.suppress(Exception):  # (one that does not say where is dropped)
                decided = unpack(data)
                if _decided_before(decided, first.memo):
                    decisions.append((segment, data))
    kept = [k for k in memos if _at(k) < _at(first)]
    kept_places = {k.segment for k in kept}
    for info in by_name:  # what the waits of the callbacks kept took, kept with them
        segment = info.key[len(prefix) :]
        place = POSITION_MARK + segment.removeprefix(CALLBACK_TAKE_MEMO)
        if segment.startswith(CALLBACK_TAKE_MEMO) and place in kept_places:
            decisions.append((segment, (await runner.store.get(info.key)).data))
    return kept, first.memo.position, decisions


@dataclass(frozen=True, slots=True)
class Kept:
    """A memo of the run's history to copy, and its key segment."""

    segment: str
    memo: PositionedMemo


def _at(kept: Kept) -> tuple[float, int]:
    """When the call began (a memo recorded before memos kept their times:
    its position, which was then the order calls began in)."""
    memo = kept.memo
    return (memo.position if memo.began is None else memo.began, memo.position)


def _decided_before(decided: dict[str, Any], first: PositionedMemo) -> bool:
    """Whether a patch decision was taken before the call ``first`` began."""
    at = decided.get("t")
    if first.began is not None and isinstance(at, int | float):
        return at < first.began
    return bool(decided["at"] < first.position)


async def _events(runner: Inspected, run_id: str, incarnation: str) -> list[StoredObject]:
    """The events sent to the run's ``incarnation``, taken or not."""
    prefix = runner.layout.events(run_id, incarnation)
    keys = [info.key async for info in runner.store.scan(prefix)]

    async def read(key: str) -> StoredObject | None:
        try:
            return await runner.store.get(key)
        except NotFound:
            return None

    return [event for event in await bounded(read(key) for key in keys) if event is not None]


def _moved_take(memo: PositionedMemo, old_events: str, new_events: str) -> PositionedMemo:
    """An event take's memo naming the copy of the event it took (a take
    that timed out names none)."""
    try:
        recorded = unpack_stored(memo.value)
    except Exception:
        return memo  # (the replay decodes it, and says what is wrong)
    if isinstance(recorded, dict) and isinstance(recorded.get("key"), str):
        key: str = recorded["key"]
        if key.startswith(old_events):
            moved = {**recorded, "key": new_events + key[len(old_events) :]}
            return dataclasses.replace(memo, value=pack(moved))
    return memo


async def replay_many(
    runner: Inspected, run_ids: Iterable[str], *, from_step: str | None = None
) -> Bulk:
    """Replay each run as :func:`replay` does, ``READ_CONCURRENCY`` at a
    time; a run that cannot be (live, no such step, its input not kept) is
    noted with why, and the others go on."""

    async def one(runner: Inspected, run_id: str) -> None:
        await replay(runner, run_id, from_step=from_step)

    return await each(runner, run_ids, "replayed", one)
