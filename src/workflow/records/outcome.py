"""Outcome records: the one durable answer for each run.

Written create-if-absent before the queue entry is acked, so the first
writer's answer is the answer: a zombie that finishes late, a duplicate
delivery, a resubmission, all read the same record. It outlives the queue
entry (which the ack removes) until retention sweeps it.

A swept run leaves a :class:`Tombstone` at its outcome key, naming its
incarnation: no outcome to any reader, but the key stays taken, so a zombie
of the swept run that finishes late cannot record an outcome there (its
create-if-absent finds the tombstone) to answer the key's next run. The next
run's outcome replaces it; the sweep removes it after another window.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from stepstone.errors import JobCancelled, JobFailed, PayloadUnreadable
from stepstone.records.attributes import stored_attributes
from stepstone.records.codec import codec_for_type, pack, unpack
from stepstone.records.envelope import Envelope
from stepstone.records.error_texts import open_optional, open_text
from stepstone.records.large_values import LargeField, Stored, Unpacked, record_body, rejoined
from stepstone.records.payloads import Payloads
from stepstone.runtime import plausible
from stepstone.runtime.decision import FailureKind
from stepstone.runtime.status import JobStatus
from stepstone.store.parts import Body, Parts, SplitObject

T = TypeVar("T")

RECORD_VERSION = 1
INPUT_KEPT_BYTES = 64 * 1024
"""A finished run's input is kept in its outcome record up to this size (its
canonical JSON): ``show``, the web view and a replay read it there once the
queue record, which carries it while the run lives, is gone."""


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """Why a run failed: the reason it stopped, the last error's message and
    class, and where it was raised (the traceback's last frames, when there
    was one)."""

    reason: FailureKind
    message: str
    error_type: str | None = None
    traceback: str | None = None


@dataclass(frozen=True, slots=True)
class OutcomeRecord:
    """The stored form: the result stays encoded until someone asks for it typed."""

    run_id: str
    kind: str
    status: JobStatus
    input_hash: str
    incarnation: str
    attempts: int
    finished_at: float
    result: Stored | None = None
    """The result, encoded (a large one as Parts, or read back decoded:
    :mod:`stepstone.records.large_values`)."""
    error: ErrorInfo | None = None
    progress: Any = None
    submitted_at: float | None = None
    """When the run was enqueued (the queue's clock)."""
    started_at: float | None = None
    """When the attempt that recorded this outcome started."""
    claims: int | None = None
    """The claim that recorded it (its place in the run's attempt history)."""
    claimed_at: float | None = None
    """When that claim's handler began (None: it never ran)."""
    worker: tuple[str, int, str] | None = None
    """The worker that recorded it: host, pid, worker id."""
    version: str | None = None
    """The job type's ``VERSION`` the run was submitted under."""
    key: str | None = None
    """The idempotency key the run was submitted with."""
    input: bytes | None = None
    """The run's input (canonical JSON), when at most ``INPUT_KEPT_BYTES``."""
    input_size: int | None = None
    """The input's size in bytes (also when it was too large to keep)."""
    parent: str | None = None
    """The run that submitted this one as its child (retention keeps this
    outcome while that run lives: :mod:`stepstone.records.retention`)."""
    replay_of: str | None = None
    """The incarnation this run replays (``runner.replay``; None: none)."""
    from_step: str | None = None
    """The step that replay ran from (None: from the start)."""
    lapses: int = 0
    """Leases the run lost to workers that died or hung under it (none
    spent an attempt)."""
    attributes: dict[str, str] = field(default_factory=dict)
    """The run's attributes: those it was submitted with, and (when it
    succeeded) those it set (:mod:`stepstone.records.attributes`)."""

    def encode(self) -> Body:
        return record_body(
            {
                "v": RECORD_VERSION,
                "run_id": self.run_id,
                "kind": self.kind,
                "status": self.status.value,
                "input_hash": self.input_hash,
                "incarnation": self.incarnation,
                "attempts": self.attempts,
                "finished_at": self.finished_at,
                "result": self.result,
                "error": None
                if self.error is None
                else [self.error.reason, self.error.message, self.error.error_type],
                # Beside "error" rather than in it: a reader of an older
                # version takes the error's three fields and skips this key.
                "traceback": None if self.error is None else self.error.traceback,
                "progress": self.progress,
                "submitted_at": self.submitted_at,
                "started_at": self.started_at,
                "claims": self.claims,
                "claimed_at": self.claimed_at,
                "worker": None if self.worker is None else list(self.worker),
                "version": self.version,
                "key": self.key,
                "input": self.input,
                "input_size": self.input_size,
                "parent": self.parent,
                "replay_of": self.replay_of,
                "from_step": self.from_step,
                # Only when there were some: most runs lose no lease.
                **({"lapses": self.lapses} if self.lapses else {}),
                **({"attr": self.attributes} if self.attributes else {}),
            },
            "result",
        )

    @classmethod
    def decode(cls, data: bytes) -> OutcomeRecord:
        """The record ``data`` holds; ValueError saying what is wrong when it
        holds none this library reads (garbage, a truncated object, another
        format version, a field missing or of the wrong type, a tombstone)."""
        found = decode_outcome_key(data)
        if isinstance(found, Tombstone):
            raise ValueError("a tombstone of a swept run, not an outcome record")
        return found

    def typed(self, output: Any, payloads: Payloads | None = None) -> Outcome[Any]:
        """The outcome as users see it, its result opened (by ``payloads``,
        :mod:`stepstone.records.payloads`) and decoded as ``output``.
        PayloadUnreadable when it is sealed and cannot be opened here; its
        error's texts, when sealed (:mod:`stepstone.records.error_texts`),
        opened, or saying what sealed them."""
        result = None
        if self.status is JobStatus.SUCCEEDED and self.result is not None:
            opened = (payloads if payloads is not None else Payloads()).open(self.result)
            result = codec_for_type(output).decode(opened)
        return Outcome(
            id=self.run_id,
            status=self.status,
            attempts=self.attempts,
            finished_at=self.finished_at,
            result=result,
            error=None if self.error is None else opened_error(self.error, payloads),
            progress=_opened(self.progress, payloads),
            submitted_at=self.submitted_at,
            started_at=self.started_at,
            kind=self.kind,
            lapses=self.lapses,
        )


def opened_error(error: ErrorInfo, payloads: Payloads | None) -> ErrorInfo:
    """``error`` with its sealed texts opened (:func:`open_text`): itself
    when it holds none."""
    opening = payloads if payloads is not None else Payloads()
    message = open_text(opening, error.message)
    traceback = open_optional(opening, error.traceback)
    if message is error.message and traceback is error.traceback:
        return error
    return ErrorInfo(error.reason, message, error.error_type, traceback)


def _opened(value: Any, payloads: Payloads | None) -> Any:
    """A sealed field's value opened; None when it does not open here (it only informs)."""
    try:
        return (payloads if payloads is not None else Payloads()).open_value(value)
    except PayloadUnreadable:
        return None


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What a swept run leaves at its outcome key (see the module docstring)."""

    run_id: str
    incarnation: str
    """The swept run's: a late outcome of this incarnation is not recorded."""
    swept_at: float

    def encode(self) -> bytes:
        return pack(
            {
                "v": RECORD_VERSION,
                "tombstone": self.incarnation,
                "run_id": self.run_id,
                "swept_at": self.swept_at,
            }
        )


def outcome_result(payloads: Payloads | None = None) -> LargeField:
    """What finds an outcome record's result in its first bytes, for
    ``get_split`` (a sealed one opened with ``payloads``)."""
    return LargeField("result", payloads)


def read_outcome_key(found: SplitObject, field: LargeField) -> OutcomeRecord | Tombstone:
    """What ``get_split`` read at an outcome key with ``field`` (from
    :func:`outcome_result`), as :func:`decode_outcome_key` reads it."""
    small, result = rejoined(found, field)
    return decode_outcome_key(small, result)


def decode_outcome_key(data: bytes, result: Stored | None = None) -> OutcomeRecord | Tombstone:
    """What an object at an outcome key holds: a record or a tombstone.
    ValueError saying what is wrong when it is neither (garbage, a truncated
    object, another format version, a field missing or of the wrong type, a
    time or count that could not be real: :mod:`stepstone.runtime.plausible`).
    ``result``: the large result :func:`read_outcome_key` took out of it."""
    raw = _fields(data)
    if result is not None:
        raw["result"] = result
    try:
        if "tombstone" in raw:
            found: OutcomeRecord | Tombstone = Tombstone(
                run_id=raw["run_id"],
                incarnation=raw["tombstone"],
                swept_at=plausible.time(raw["swept_at"], "swept_at"),
            )
        else:
            error = raw.get("error")
            found = OutcomeRecord(
                run_id=raw["run_id"],
                kind=raw["kind"] if "kind" in raw else raw["name"],
                status=JobStatus(raw["status"]),
                input_hash=raw["input_hash"],
                incarnation=raw.get("incarnation", ""),
                attempts=plausible.count(raw["attempts"], "attempts"),
                finished_at=plausible.time(raw["finished_at"], "finished_at"),
                result=raw.get("result"),
                error=None if error is None else _error_info(error, raw.get("traceback")),
                progress=raw.get("progress"),
                submitted_at=plausible.optional_time(raw.get("submitted_at"), "submitted_at"),
                started_at=plausible.optional_time(raw.get("started_at"), "started_at"),
                claims=plausible.optional_count(raw.get("claims"), "claims"),
                claimed_at=plausible.optional_time(raw.get("claimed_at"), "claimed_at"),
                worker=_worker(raw.get("worker")),
                version=raw.get("version"),
                key=raw.get("key"),
                input=raw.get("input"),
                input_size=plausible.optional_count(
                    raw.get("input_size"), "input_size", most=2**40
                ),
                parent=raw.get("parent"),
                replay_of=raw.get("replay_of"),
                from_step=raw.get("from_step"),
                lapses=plausible.count(raw.get("lapses", 0), "lapses"),
                attributes=stored_attributes(raw.get("attr")),
            )
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ValueError(f"a field is missing or malformed ({type(exc).__name__}: {exc})") from exc
    _check_types(found)
    return found


@dataclass(frozen=True, slots=True)
class Outcome(Generic[T]):
    """How a run ended, with its typed result when it succeeded.

    ``join()`` returns one without raising; ``unwrap()`` gives the result or
    raises :class:`JobFailed` (:class:`JobCancelled` for a cancelled run).
    """

    id: str
    status: JobStatus
    attempts: int
    finished_at: float
    result: T | None = None
    error: ErrorInfo | None = None
    progress: Any = field(default=None, repr=False)
    submitted_at: float | None = None
    started_at: float | None = None
    kind: str = ""
    """The job's kind (its type's NAME)."""
    lapses: int = 0
    """Leases the run lost to workers that died or hung under it: each cost
    it no attempt (``attempts`` counts the attempts its own code spent)."""

    @property
    def ok(self) -> bool:
        """Whether the run succeeded."""
        return self.status is JobStatus.SUCCEEDED

    def unwrap(self) -> T:
        """The result of a run that succeeded; raises ``JobFailed`` for one that
        failed and ``JobCancelled`` for one that was cancelled."""
        if self.status is JobStatus.SUCCEEDED:
            return self.result  # type: ignore[return-value]
        error = self.error or ErrorInfo(FailureKind.UNKNOWN, "no error recorded")
        exc = JobCancelled if self.status is JobStatus.CANCELLED else JobFailed
        raise exc(self.id, error.reason, error.message, error.error_type)


def _worker(value: Any) -> tuple[str, int, str] | None:
    if value is None:
        return None
    host, pid, worker_id = value
    if not (isinstance(host, str) and isinstance(pid, int) and isinstance(worker_id, str)):
        raise ValueError("the worker field has the wrong type")
    plausible.count(pid, "the worker's pid", most=2**31)
    return host, pid, worker_id


def _error_info(error: list[Any], traceback: Any) -> ErrorInfo:
    reason, message = FailureKind(error[0]), error[1]
    return ErrorInfo(reason, message, error[2] if len(error) > 2 else None, traceback)


def _fields(data: bytes) -> dict[str, Any]:
    """The map an outcome record is stored as, of the one version read here."""
    try:
        raw = unpack(data)
    except Exception as exc:
        raise ValueError(f"not a MessagePack document ({type(exc).__name__}: {exc})") from exc
    if not isinstance(raw, dict) or "v" not in raw:
        raise ValueError("not an outcome record")
    if raw["v"] != RECORD_VERSION:
        raise ValueError(
            f"an outcome record of format version {raw['v']!r}; "
            f"this library reads version {RECORD_VERSION}"
        )
    return raw


def _check_types(found: OutcomeRecord | Tombstone) -> None:
    if isinstance(found, Tombstone):
        if not isinstance(found.run_id, str) or not isinstance(found.incarnation, str):
            raise ValueError("a field has the wrong type")
        return
    record = found
    texts = (record.run_id, record.kind, record.input_hash, record.incarnation)
    error = record.error
    if (
        not all(isinstance(text, str) for text in texts)
        or not isinstance(record.result, bytes | Parts | Unpacked | None)
        or (error is not None and not isinstance(error.message, str))
        or (error is not None and not isinstance(error.error_type, str | None))
        or (error is not None and not isinstance(error.traceback, str | None))
        or not isinstance(record.claims, int | None)
        or not all(
            isinstance(text, str | None)
            for text in (
                record.version,
                record.key,
                record.parent,
                record.replay_of,
                record.from_step,
            )
        )
        or not isinstance(record.input, bytes | None)
        or not isinstance(record.input_size, int | None)
    ):
        raise ValueError("a field has the wrong type")


def about_the_run(envelope: Envelope) -> dict[str, Any]:
    """The fields an outcome record keeps of the run it answers, from its
    envelope: version, idempotency key, parent, the input while it is small
    enough (``INPUT_KEPT_BYTES``), and the incarnation it replays."""
    data = envelope.input
    return {
        "version": envelope.version,
        "key": envelope.key,
        "parent": envelope.parent,
        "input": data if len(data) <= INPUT_KEPT_BYTES else None,
        "input_size": len(data),
        "replay_of": envelope.replay_of,
        "from_step": envelope.from_step,
        "attributes": dict(envelope.attributes),
    }
