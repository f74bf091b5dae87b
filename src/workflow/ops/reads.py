"""Read-side helpers over a runner's store and queue: what ``stepstone`` shows.

These read the same objects the engine writes (see :mod:`workflow.layout`)
without knowing any job type, so an operator's shell, which imports none of
the application's code, can list, show, retry and purge runs. Results and
memos are shown as their MessagePack values (a pydantic model appears as
the dict it was dumped to).

A record that will not decode (garbage, truncated, a format this library
does not read) never stops a command: it comes back as :class:`Unreadable`,
naming its key and why, beside everything else that could be read.

Kept out of :mod:`stepstone.runner` on purpose: the runner is the write path
and these are tools around it; nothing here is needed to run a job. Listing
is :mod:`stepstone.ops.listing`, changing runs :mod:`stepstone.ops.actions`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from stepstone.errors import InspectError, PayloadUnreadable
from stepstone.handles.state import attempts_of
from stepstone.ops.debounced import DebounceShown, read_debounce
from stepstone.records.attempts import AttemptInfo
from stepstone.records.attributes import marked
from stepstone.records.calls import (
    ATTRIBUTE_MARK,
    CALLBACK_TAKE_MEMO,
    CHANGED_ARGS_MEMO,
    VERSION_WAIT_MEMO,
    Call,
    PositionedMemo,
)
from stepstone.records.codec import unpack, unpack_stored
from stepstone.records.envelope import Envelope
from stepstone.records.error_texts import opened_job
from stepstone.records.family import Family
from stepstone.records.history import read_history
from stepstone.records.large_values import Stored
from stepstone.records.layout import Path, check_run_id, place_of, step_name
from stepstone.records.outcome import OutcomeRecord, decode_outcome_key, opened_error
from stepstone.records.payloads import Payloads, sealed, sealed_by
from stepstone.records.retention import Runs
from stepstone.records.unreadable import Unreadable as Unreadable  # (ops read it here)
from stepstone.runtime import plausible
from stepstone.runtime.error_text import describe
from stepstone.runtime.errors import MalformedPayload
from stepstone.runtime.queue import JobRecord
from stepstone.runtime.status import JobStatus
from stepstone.runtime.store_queue import CorruptRecord
from stepstone.store import NotFound, ObjectInfo

READ_CONCURRENCY = 16
"""GETs in flight at once when a command has to read many records."""


class Inspected(Runs, Protocol):
    """What the tools work on: a store, a layout, a clock, the queue, and
    cancelling a run (a JobRunner is one)."""

    async def cancel(self, run_id: str, *, leave_children: bool = False) -> bool: ...


def parse_status(name: str) -> JobStatus:
    """The status called ``name`` (as ``stepstone ls --status`` takes it)."""
    try:
        return JobStatus(name)
    except ValueError:
        names = ", ".join(status.value for status in JobStatus)
        raise InspectError(f"unknown status {name!r} (one of: {names})") from None


def lacks(queue: object, doing: str, instead: str = "") -> InspectError:
    """The error for a command the queue's backend does not offer (see
    :mod:`stepstone.runtime.capabilities`; SqsQueue cannot list, for one)."""
    return InspectError(f"the queue cannot {doing}: {queue!r} does not offer it{instead}")


@dataclass(frozen=True, slots=True)
class StoredMemo:
    """One memo of a run, as stored (its value decoded as MessagePack)."""

    key: str
    incarnation: str
    step_key: str
    size: int
    modified: float
    value: Any = None
    unreadable: str | None = None
    """Why the value would not decode, when it would not."""
    position: int | None = None
    """Its place in its branch's history (None: a memo keyed by name,
    recorded before positions existed or outside the history)."""
    call: Call | None = None
    """The call it records, read from the memo (None: keyed by name)."""
    branch: Path = ()
    """The branch of the run that made the call (() for the run's own task)."""
    began: float | None = None
    ended: float | None = None
    """When the call began and was recorded, by the worker's clock (None:
    recorded before memos kept it)."""
    changed_args: int | None = None
    """The claim that last replayed this step with other arguments than it
    recorded (0: one whose number is not known; None: none did)."""

    @property
    def step(self) -> str:
        """The call's readable name: the step's (``charge #2`` for the second
        ``charge`` of a run recorded before positions), or the call's
        (``a sleep``) when it is no step."""
        if self.call is not None:
            return self.call.name if self.call.call == "step" else self.call.describe()
        if self.position is not None:
            return f"position {self.position}"
        return step_name(self.step_key)


@dataclass(frozen=True, slots=True)
class ChildSpan:
    """One child of a run as its timeline draws it: from its submit to its end."""

    id: str
    kind: str
    status: JobStatus
    submitted: float
    finished: float | None
    """None while it lives."""


CHILDREN_READ = 20
"""A run's children whose records its page reads (two GETs each) to draw them."""


async def child_spans(runner: Inspected, children: list[str]) -> list[ChildSpan]:
    """When each of ``children`` was submitted and ended, from its outcome or
    its queue record; a child with neither readable is left out."""

    async def one(child: str) -> ChildSpan | None:
        queued, outcome = await asyncio.gather(
            read_queued(runner, child), read_outcome(runner, child)
        )
        if isinstance(outcome, OutcomeRecord):
            submitted = outcome.submitted_at or outcome.started_at or outcome.finished_at
            return ChildSpan(child, outcome.kind, outcome.status, submitted, outcome.finished_at)
        if isinstance(queued, JobRecord):
            return ChildSpan(child, queued.kind, queued.status, queued.created_at, None)
        return None

    return [span for span in await bounded(one(child) for child in children) if span]


@dataclass(slots=True)
class Detail:
    """Everything stored about one job: ``stepstone show``."""

    id: str
    queued: JobRecord | None
    outcome: OutcomeRecord | None
    progress: Any
    memos: list[StoredMemo] = field(default_factory=list)
    incarnation: str | None = None
    """The incarnation of the live or recorded run; memos of others are leftovers."""
    input: Any = None
    version: str | None = None
    """The job type's ``VERSION`` the run was submitted under."""
    key: str | None = None
    """The idempotency key it was submitted with."""
    replay_of: str | None = None
    """The incarnation this one replays (``runner.replay``), whose memos and
    attempts stay; None: the run was never replayed."""
    from_step: str | None = None
    """The step that replay ran from (None: from the start)."""
    replaced_history: list[AttemptInfo] = field(default_factory=list)
    """The claims of the incarnation it replays, in order."""
    parent: str | None = None
    """The run that submitted it as its child."""
    children: list[str] = field(default_factory=list)
    """The children it submitted (``ctx.submit``), by id: a cancel takes the
    live ones it created with it (:mod:`stepstone.execute.cancelling`)."""
    child_spans: list[ChildSpan] = field(default_factory=list)
    """When each of the first ``CHILDREN_READ`` children ran, for its timeline."""
    unreadable: dict[str, Unreadable] = field(default_factory=dict)
    """The job's records that would not decode, by part (``queue``,
    ``outcome``, ``progress``); an unreadable memo says so itself."""
    history: list[AttemptInfo] = field(default_factory=list)
    """The claims of the run's incarnation, in order (:mod:`stepstone.records.history`)."""
    unreadable_attempts: list[Unreadable] = field(default_factory=list)
    attributes: dict[str, str] = field(default_factory=dict)
    """Its attributes: those it was submitted with, and those it set
    (:mod:`stepstone.records.attributes`)."""
    debounce: DebounceShown | None = None
    """A debounced run's window as its key's object holds it now."""

    def unreadable_records(self) -> list[Unreadable]:
        """Every record of the job that would not decode, memos and attempts included."""
        memos = [Unreadable(m.key, m.unreadable) for m in self.memos if m.unreadable is not None]
        return [*self.unreadable.values(), *memos, *self.unreadable_attempts]

    @property
    def status(self) -> JobStatus | None:
        """Where the run is; None when nothing but leftovers is stored."""
        if self.queued is not None and self.queued.status is JobStatus.DEAD:
            return JobStatus.DEAD
        if self.outcome is not None:
            return self.outcome.status
        if self.queued is not None:
            return self.queued.status
        return None

    @property
    def kind(self) -> str:
        if self.outcome is not None:
            return self.outcome.kind
        if self.queued is not None:
            return self.queued.kind
        return ""

    @property
    def attempts(self) -> int | None:
        """The attempts the run has spent, counted as ``ls``, the web view,
        ``runner.status`` and the worker's log count them: a waiting run's
        paused attempt included (:func:`stepstone.handles.state.attempts_of`);
        None when nothing but leftovers is stored."""
        if self.queued is not None:
            return attempts_of(self.queued)
        if self.outcome is not None:
            return self.outcome.attempts
        return None

    @property
    def lapses(self) -> int:
        """Leases the run lost to workers that died or hung under it (none
        spent an attempt)."""
        if self.queued is not None:
            return self.queued.lapses
        return 0 if self.outcome is None else self.outcome.lapses


def decode_value(data: Stored | str | None) -> Any:
    """A stored MessagePack value, or a short note when it is not one (a
    sealed payload not opened: what sealed it, ``<encrypted (key k2)>``;
    a note made already: itself)."""
    if data is None or isinstance(data, str):
        return data
    if isinstance(data, bytes) and sealed(data):
        return f"<{sealed_by(data)}>"
    try:
        return unpack_stored(data)
    except Exception:
        return f"<{len(data)} undecodable bytes>"


def payloads_of(runner: object) -> Payloads:
    """What a tool opens payloads with: the runner's codecs (none: it opens
    none, and shows what sealed each, ``<encrypted (key k2)>``)."""
    codecs = getattr(runner, "codec", None)
    return Payloads(codecs if isinstance(codecs, list) else ())


def shown_value(payloads: Payloads, data: Stored) -> Any:
    """A stored payload opened and decoded, or the note shown in its place
    (:func:`decode_value`; ``<encrypted (key k2)>`` when it does not open)."""
    try:
        return decode_value(payloads.open(data))
    except PayloadUnreadable as exc:
        return exc.shown()


def opened_input(payloads: Payloads, data: bytes) -> Any:
    """A run's input as JSON, opened; the note shown in its place when it
    does not open; None when it is not JSON."""
    try:
        return json.loads(payloads.open_bytes(data))
    except PayloadUnreadable as exc:
        return exc.shown()
    except ValueError:
        return None


async def read_outcome(runner: Inspected, run_id: str) -> OutcomeRecord | Unreadable | None:
    """The run's outcome record; Unreadable when it does not decode; None when
    there is none (a swept run's tombstone is none)."""
    return await _read_outcome_at(runner, runner.layout.outcome(run_id))


async def _read_outcome_at(runner: Inspected, key: str) -> OutcomeRecord | Unreadable | None:
    try:
        stored = await runner.store.get(key)
    except NotFound:
        return None
    try:
        found = decode_outcome_key(stored.data)
    except ValueError as exc:  # what decode_outcome_key says of anything that is no record
        return Unreadable(key, str(exc))
    if not isinstance(found, OutcomeRecord):
        return None  # (a tombstone)
    payloads = payloads_of(runner)
    with contextlib.suppress(PayloadUnreadable):  # (else decode_value says what sealed it)
        found = dataclasses.replace(found, result=payloads.open(found.result))
    with contextlib.suppress(PayloadUnreadable):
        found = dataclasses.replace(found, progress=payloads.open_value(found.progress))
    return found


async def read_progress(runner: Inspected, run_id: str, incarnation: str | None) -> Any:
    """The last progress value the run's ``incarnation`` reported (None when
    there is none); Unreadable when its record does not decode."""
    if incarnation is None:
        return None
    key = runner.layout.progress(run_id, incarnation)
    try:
        stored = await runner.store.get(key)
    except NotFound:
        return None
    try:
        raw = unpack(stored.data)
        if not isinstance(raw, dict) or "value" not in raw:
            raise ValueError("not a progress record")
    except Exception as exc:
        return Unreadable(key, describe(exc))
    try:
        return payloads_of(runner).open_value(raw["value"])
    except PayloadUnreadable as exc:
        return exc.shown()


async def list_memos(runner: Inspected, run_id: str, *, values: bool = True) -> list[StoredMemo]:
    """Every memo of every incarnation of the run, in key order (a memo of
    the run's history is read for its call even without ``values``)."""
    prefix = runner.layout.memos(run_id)
    infos = [info async for info in runner.store.scan(prefix)]
    payloads = payloads_of(runner)

    # (an attribute's mark is an index's, not a call's: records.attributes)
    infos = [info for info in infos if not _segment(prefix, info).startswith(ATTRIBUTE_MARK)]
    notes = [info for info in infos if _segment(prefix, info).startswith(NOTES)]
    infos = [info for info in infos if not _segment(prefix, info).startswith(NOTES)]

    async def one(info: ObjectInfo) -> StoredMemo:
        incarnation, _, key = info.key[len(prefix) :].partition("/")
        place = place_of(key)
        value: Any = None
        call: Call | None = None
        why = None
        branch: Path = ()
        began = ended = None
        if values or place is not None:  # (a positioned memo names its call inside)
            try:
                data = (await runner.store.get(info.key)).data
                if place is not None:
                    memo = PositionedMemo.decode(data)
                    value, call = shown_value(payloads, memo.value), memo.call
                    if call.call == "event" and isinstance(value, dict):
                        took = value.get("data")
                        if isinstance(took, bytes):  # (the event it took, sealed as it was sent)
                            value = {**value, "data": _opened_or_shown(payloads, took)}
                    if call.call == "callback" and isinstance(value, dict) and value.get("url"):
                        value = {**value, "url": HIDDEN_URL}  # (a credential: never shown)
                    branch, began, ended = memo.branch, memo.began, memo.ended
                else:
                    value = unpack(data)
                    began = ended = _decided_at(value)
                    body = value.get("body") if isinstance(value, dict) else None
                    if key.startswith(CALLBACK_TAKE_MEMO) and isinstance(body, bytes):
                        value = {**value, "body": _opened_or_shown(payloads, body)}
            except NotFound:
                value = None
            except Exception as exc:
                why = describe(exc)
        if not values:
            value = None
        return StoredMemo(
            info.key,
            incarnation,
            key,
            info.size,
            info.modified,
            value,
            why,
            None if place is None else place[1],
            call,
            branch,
            began,
            ended,
            changed.get(info.key),
        )

    async def claim_of(note: ObjectInfo) -> tuple[str, int | None]:
        incarnation, _, segment = note.key[len(prefix) :].partition("/")
        memo_key = f"{prefix}{incarnation}/{segment[len(CHANGED_ARGS_MEMO) :]}"
        try:
            claim = unpack((await runner.store.get(note.key)).data)["claim"]
        except Exception:  # (an unreadable note still says the arguments changed)
            claim = 0
        return memo_key, claim if isinstance(claim, int) else 0

    changed = dict(
        await bounded(
            claim_of(note) for note in notes if _segment(prefix, note).startswith(CHANGED_ARGS_MEMO)
        )
    )
    return await bounded(one(info) for info in infos)


HIDDEN_URL = "(a presigned URL: not shown, whoever holds it can complete the callback)"
"""What a callback's memo shows in place of its URL."""

NOTES = (CHANGED_ARGS_MEMO, VERSION_WAIT_MEMO)
"""Memos that are notes about a run, not its calls: listed with none."""


def _opened_or_shown(payloads: Payloads, data: bytes) -> bytes | str:
    """``data`` opened; the note shown in its place when it does not open."""
    try:
        opened: bytes = payloads.open_bytes(data)
    except PayloadUnreadable as exc:
        return exc.shown()
    return opened


def _segment(prefix: str, info: ObjectInfo) -> str:
    return info.key[len(prefix) :].partition("/")[2]


def _decided_at(value: Any) -> float | None:
    """When a patch decision was taken (``t``), if it says."""
    at = value.get("t") if isinstance(value, dict) else None
    try:
        return None if at is None else plausible.time(at, "a patch decision's time")
    except plausible.Implausible:
        return None


async def detail(runner: Inspected, run_id: str) -> Detail:
    """The job's queue record, outcome, progress, memos and attempt history,
    and which of them would not decode. Raises InspectError when the store
    knows nothing of the id."""
    check_id(run_id)
    payloads = payloads_of(runner)
    queued, outcome, memos, children = await asyncio.gather(
        read_queued(runner, run_id),
        read_outcome(runner, run_id),
        list_memos(runner, run_id),
        Family(runner.store, runner.layout).children(run_id),
    )
    input_json: Any = None
    incarnation: str | None = None
    version = key = replay_of = from_step = parent = None
    if isinstance(outcome, OutcomeRecord):
        version, key, parent = outcome.version, outcome.key, outcome.parent
        replay_of, from_step = outcome.replay_of, outcome.from_step
    if isinstance(queued, JobRecord):
        with contextlib.suppress(MalformedPayload):
            envelope = Envelope.decode(queued.payload)
            incarnation = envelope.incarnation
            version, key, parent = envelope.version, envelope.key, envelope.parent
            replay_of, from_step = envelope.replay_of, envelope.from_step
            input_json = opened_input(payloads_of(runner), envelope.input)
    if incarnation is None and isinstance(outcome, OutcomeRecord):
        incarnation = outcome.incarnation or None
    if input_json is None and isinstance(outcome, OutcomeRecord) and outcome.input is not None:
        input_json = opened_input(payloads_of(runner), outcome.input)  # (an outcome keeps it)
    recorded = outcome if isinstance(outcome, OutcomeRecord) else None
    attributes = {} if recorded is None else dict(recorded.attributes)
    if isinstance(queued, JobRecord):
        with contextlib.suppress(MalformedPayload):
            attributes.update(Envelope.decode(queued.payload).attributes)
    if incarnation is not None:  # (those it set, marked among its memos: one LIST)
        marks = runner.layout.memo(run_id, incarnation, ATTRIBUTE_MARK)
        async for info in runner.store.scan(marks):
            pair = marked(info.key.rpartition("/")[2])
            if pair is not None:
                attributes[pair[0]] = pair[1]
    progress, history, replaced = await asyncio.gather(
        read_progress(runner, run_id, incarnation),
        read_history(runner.store, runner.layout, run_id, incarnation, recorded, payloads),
        read_history(runner.store, runner.layout, run_id, replay_of, None, payloads),
    )
    if queued is None and outcome is None and progress is None and not memos:
        raise InspectError(f"no run {run_id} in {runner.store.location}")
    parts = {"queue": queued, "outcome": outcome, "progress": progress}
    unreadable = {part: item for part, item in parts.items() if isinstance(item, Unreadable)}
    # Shown, not written back (a retry keeps the outcome's texts as stored):
    # error texts opened, or saying what sealed them (records.error_texts).
    if isinstance(queued, JobRecord):
        queued = opened_job(payloads, queued)
    if isinstance(outcome, OutcomeRecord) and outcome.error is not None:
        outcome = dataclasses.replace(outcome, error=opened_error(outcome.error, payloads))
    found = Detail(
        run_id,
        None if isinstance(queued, Unreadable) else queued,
        None if isinstance(outcome, Unreadable) else outcome,
        None if isinstance(progress, Unreadable) else progress,
        memos,
        unreadable=unreadable,
    )
    if isinstance(queued, JobRecord):
        found.debounce = await read_debounce(runner.store, runner.layout, queued)
        window = None if found.debounce is None else found.debounce.window
        if window is not None:
            with contextlib.suppress(ValueError, PayloadUnreadable):
                # (what it will run, as things stand)
                input_json = json.loads(payloads_of(runner).open_bytes(window.input))
    found.incarnation = incarnation
    found.input = input_json
    found.version, found.key = version, key
    found.replay_of, found.from_step = replay_of, from_step
    found.parent, found.children = parent, children
    found.attributes = attributes
    found.child_spans = await child_spans(runner, children[:CHILDREN_READ])
    found.history = history.attempts
    found.replaced_history = replaced.attempts
    found.unreadable_attempts = [
        Unreadable(key, why) for key, why in [*history.unreadable, *replaced.unreadable]
    ]
    return found


async def read_queued(runner: Inspected, run_id: str) -> JobRecord | Unreadable | None:
    """The run's queue record; Unreadable when it does not decode; None when there is none."""
    try:
        return await runner.queue.get(run_id)
    except CorruptRecord as exc:
        return Unreadable(exc.key, str(exc).removesuffix(f" (record {exc.key})"))


async def iter_outcomes(
    runner: Inspected, *, older_than: float | None = None
) -> AsyncIterator[ObjectInfo]:
    """The outcome objects, in key order (one LIST per thousand); with
    ``older_than``, only those last modified before that epoch time."""
    async for info in runner.store.scan(runner.layout.outcomes()):
        if older_than is None or info.modified <= older_than:
            yield info


async def read_outcomes(
    runner: Inspected, infos: Iterable[ObjectInfo]
) -> list[OutcomeRecord | Unreadable]:
    """The records behind listed outcome objects, or what kept each from being
    read; those gone since the listing are left out."""
    found = await bounded(_read_outcome_at(runner, info.key) for info in infos)
    return [record for record in found if record is not None]


def check_id(run_id: str) -> None:
    try:
        check_run_id(run_id)
    except ValueError as exc:
        raise InspectError(str(exc)) from None


async def bounded(coros: Iterable[Any]) -> list[Any]:
    semaphore = asyncio.Semaphore(READ_CONCURRENCY)

    async def guarded(coro: Any) -> Any:
        async with semaphore:
            return await coro

    return list(await asyncio.gather(*(guarded(c) for c in coros)))
