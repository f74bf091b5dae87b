"""Every error stepstone raises, in one tree, and the two verdicts a job raises.

Catch ``StepstoneError`` for anything stepstone raises; catch a branch for
one kind of trouble::

    StepstoneError
    ├── StoreError                the object store failed or refused (names the store and key)
    │   ├── StoreUnavailable      transient: unreachable, throttled, timing out (retried)
    │   │   └── Throttled         ... asked to send less (SlowDown, 429), still after retries
    │   ├── StoreConfigError      no such bucket, bad credentials, bad URL: retrying won't help
    │   ├── NotFound              the object does not exist
    │   ├── PreconditionFailed    a conditional write lost: an answer, never retried
    │   │   └── AlreadyExists     a create-if-absent found the object there
    │   └── InvalidKey            a key refused before it reached the store (a ValueError)
    ├── WorkerIdInUse             a worker id another live worker on this host holds
    ├── QueueError                the lease queue refused an operation
    │   ├── PayloadTooLarge       over the queue's payload limit; nothing enqueued (a ValueError)
    │   ├── CorruptRecord         a queue record that does not decode (names its key)
    │   ├── SqsUnsupported        an operation SQS cannot answer (listing, for one)
    │   └── LeaseLost             raised into a job whose lease another worker took over
    └── JobError                  the job API refused a call, or a job ended badly
        ├── InputMismatch         an idempotency key reused with a different input
        ├── EncodingError         an input or result that cannot be stored (a ValueError)
        ├── InvalidRunId          not a run id (a ValueError): safe to hand user input to
        ├── DuplicateJobName      two job types registered under one NAME (a ValueError)
        ├── UnknownJob            no job type of that NAME is registered (a LookupError)
        ├── EventRefused          an event for a run that is not live: unknown or finished
        ├── CorruptOutcome        an outcome object that cannot answer this run (names its key)
        ├── CorruptMemo           a memoized step that does not decode (names the step and key)
        ├── PayloadUnreadable     a sealed payload this process cannot open: a key or codec it
        │                         lacks (names the key id), or damaged ciphertext
        ├── InvalidWait           a durable wait given what it cannot keep (a ValueError)
        ├── BadEvent              an event a wait took that is not of its type (names the run
        │                         and the event)
        ├── StreamClosed          a write to a stream the run closed
        ├── BadStreamItem         a stream item that does not decode, or not as the reader's type
        ├── RunNotFound           a run nothing is known of: never submitted, or swept
        ├── CallbackRefused       a completion of a callback that cannot take one: unknown,
        │                         expired, taken, its run ended; nothing was completed
        ├── CallbackTimeout       a callback's timeout passed before it was completed
        ├── BadCallback           a callback's completion that is not of its type, or too
        │                         large (names the run and the callback)
        ├── NonDeterministicReplay  a replay's call differs from the one its run recorded there
        ├── InspectError          an operator's request that cannot be done (no such run, a
        │                         queue that cannot list), with the reason to show
        └── JobFailed             awaiting a run that failed: reason, message, error_type
            └── JobCancelled      ... because it was cancelled

A job raises these to tell the worker what to do with its attempt; they are
not errors stepstone raises, so they stand outside the tree::

    Permanent                     fail now, for good: a retry would fail the same way
    RetryLater(delay)             not now: run again after ``delay`` seconds, attempt not spent
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stepstone.runtime import (
    CorruptRecord,
    LeaseLost,
    PayloadTooLarge,
    Permanent,
    QueueError,
    RetryLater,
    SqsUnsupported,
    WorkerIdInUse,
)
from stepstone.store import (
    AlreadyExists,
    InvalidKey,
    NotFound,
    PreconditionFailed,
    StepstoneError,
    StoreConfigError,
    StoreError,
    StoreUnavailable,
    Throttled,
)

__all__ = [
    "AlreadyExists",
    "BadCallback",
    "BadEvent",
    "BadStreamItem",
    "CallbackRefused",
    "CallbackTimeout",
    "CorruptMemo",
    "CorruptOutcome",
    "CorruptRecord",
    "DebounceBacklog",
    "DuplicateJobName",
    "EncodingError",
    "EventRefused",
    "InputMismatch",
    "InspectError",
    "InvalidRunId",
    "InvalidWait",
    "InvalidKey",
    "JobCancelled",
    "JobError",
    "JobFailed",
    "LeaseLost",
    "NonDeterministicReplay",
    "NotFound",
    "PayloadTooLarge",
    "PayloadUnreadable",
    "Permanent",
    "PreconditionFailed",
    "QueueError",
    "RetryLater",
    "RunNotFound",
    "SqsUnsupported",
    "StepstoneError",
    "StoreConfigError",
    "StoreError",
    "StoreUnavailable",
    "StreamClosed",
    "Throttled",
    "UnknownJob",
    "WorkerIdInUse",
]


class JobError(StepstoneError):
    """Base class of the job API's errors: refusals at the call site, each
    naming what is wrong, and :class:`JobFailed` for a job that ended badly."""


class InputMismatch(JobError):
    """A job was submitted with an idempotency key already used for a different input.

    The key names one run; a different payload under it is almost always a bug
    in how the caller derives keys, so it is refused rather than answered with
    the other input's result.
    """

    def __init__(
        self,
        run_id: str,
        kind: str = "",
        *,
        handles: Sequence[Any] = (),
        key: str | None = None,
        parent: str | None = None,
    ) -> None:
        self.run_id = run_id
        self.kind = kind
        self.key = key
        """The idempotency key, where the submit that was refused knew it."""
        self.parent = parent
        """The run whose ``ctx.submit`` it was (a child job), if one's."""
        self.handles: list[Any] = list(handles)
        """From ``submit_many``: one entry per job of the batch, in order, the
        job's handle where it was submitted (or joined its run), None where it
        was refused; so a retry of the batch can leave out what went in.
        Empty from ``submit``."""
        what = f"job {kind!r}" if kind else "a job"
        if parent is not None:
            what = f"the child {what} of run {parent}"
        under = "" if key is None else f" {_shown_key(key)}"
        submitted = sum(handle is not None for handle in self.handles)
        batch = (
            f"; the batch's other {submitted} job(s) were submitted (their handles: .handles)"
            if submitted
            else ""
        )
        super().__init__(
            f"{what} was submitted with an idempotency key{under} already used for a "
            f"different input (run {run_id}){batch}"
        )


class EncodingError(JobError, ValueError):
    """A job input, step result or job result that cannot be stored.

    At submit it is raised to the caller; at run time the attempt fails
    permanently with this as its message.
    """

    def __init__(self, message: str, *, job: str, step: str | None = None) -> None:
        self.job = job
        self.step = step
        where = f"job {job!r}" + (f", step {step!r}" if step is not None else "")
        super().__init__(f"{where}: {message}")


class InvalidRunId(JobError, ValueError):
    """A string that is not a run id (8 to 64 lowercase hex digits).

    Raised before anything is read, so an API may pass an id from a request
    straight to ``runner.status`` or ``runner.handle`` and answer 404 on this.
    """


class InvalidAttribute(JobError, ValueError):
    """An attribute name or value a run may not have (``SubmitOptions(attributes=...)``,
    ``ctx.set_attributes``, a listing's filter), saying which and why; raised
    before anything is written or read."""


class DuplicateJobName(JobError, ValueError):
    """Two job types registered on one runner share a NAME."""


class UnknownJob(JobError, LookupError):
    """No job type with this NAME is registered on the runner."""


class EventRefused(JobError, LookupError):
    """``send_event`` to a run that is not live: never submitted, swept, or
    already finished. Nothing was delivered."""


class CorruptOutcome(JobError):
    """The object at a run's outcome key cannot be this run's answer: it does
    not decode, it is a record of a format version this library does not
    read, or it records a run of another input.

    Raised where the object is read (awaiting a handle, ``submit``,
    ``status``); a worker that meets it ends the run without recording an
    outcome, its queue record dead with this message. ``key`` names the
    object, ``reason`` says what is wrong with it.
    """

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"outcome record {key}: {reason}")


class CorruptMemo(JobError):
    """A memoized step's recorded value does not decode (as its function's
    return type): the run cannot replay the step, and running it again could
    repeat its side effect, so the attempt fails permanently."""

    def __init__(self, key: str, reason: str, *, job: str, step: str) -> None:
        self.key = key
        self.reason = reason
        self.job = job
        self.step = step
        super().__init__(f"job {job!r}, step {step!r}: the memo {key} does not decode: {reason}")


class PayloadUnreadable(JobError):
    """A sealed payload (an input, a step's result, an event, ...) this
    process cannot open: sealed by a codec it is not given, under a key it
    does not hold (``key_id`` names it), or damaged or altered since it was
    written. A worker that meets one fails the run for good, saying so:
    no retry would find the key.
    """

    def __init__(
        self, message: str, *, key_id: str = "", sealed_by: str = "", missing: bool = False
    ) -> None:
        self.key_id = key_id
        """The id of the key the payload was sealed under ("" when none or unknown)."""
        self.sealed_by = sealed_by
        """What sealed it, in words (``encrypted (key k1)``; "" when unknown)."""
        self.missing = missing
        """True when this process lacks the key or the codec (the payload may
        be whole); False when it was damaged or altered."""
        super().__init__(message)

    def shown(self) -> str:
        """What an operator's tool shows in the payload's place:
        ``<encrypted (key k2)>``, or, when it does not open though the key
        is held, that too."""
        what = self.sealed_by or "sealed"
        return f"<{what}>" if self.missing else f"<{what}: does not open>"


class InvalidWait(JobError, ValueError):
    """A durable wait given what it cannot keep: a duration that is negative,
    NaN or infinite, a wake time past the last one the engine represents
    (:data:`~stepstone.execute.durable_waits.LATEST_WAKE`), a naive datetime.
    A programming error, raised at the call: the attempt fails for good.
    (Its ``ValueError`` base keeps code that caught the earlier error working.)"""


class BadEvent(JobError):
    """An event a wait took does not validate as the type the wait declares.

    The event is recorded as taken, so every replay would take it again and
    fail alike: the attempt fails for good, naming the run, the event (its
    name and key) and what is wrong (pydantic's message names the field)."""

    def __init__(self, run_id: str, name: str, key: str, reason: str) -> None:
        self.run_id = run_id
        self.name = name
        self.key = key
        self.reason = reason
        super().__init__(
            f"run {run_id}: event {name!r} ({key}) is not of the type waited for: {reason}"
        )


class StreamClosed(JobError):
    """A write to a stream this run closed (``await stream.close()``): a
    programming error, raised at the call; the attempt fails for good."""

    def __init__(self, run_id: str, name: str) -> None:
        self.run_id = run_id
        self.name = name
        super().__init__(f"run {run_id}: stream {name!r} is closed; nothing more can be written")


class BadStreamItem(JobError):
    """A stream item a reader cannot give: its record does not decode, or
    its value does not validate as the type the reader asked for. Names the
    run, the stream, the item's offset and its key, and what is wrong."""

    def __init__(self, run_id: str, name: str, offset: int, key: str, reason: str) -> None:
        self.run_id = run_id
        self.name = name
        self.offset = offset
        self.key = key
        self.reason = reason
        super().__init__(
            f"run {run_id}: item {offset} of stream {name!r} ({key}) cannot be read: {reason}"
        )


class RunNotFound(JobError, LookupError):
    """Nothing is known of the run asked for: it was never submitted, or
    retention swept it (reading a stream of it, ``runner.stream``)."""


class CallbackRefused(JobError, LookupError):
    """A completion of a callback (``runner.complete_callback``) that cannot
    be taken: the id names no callback, the callback expired or its wait
    already took a completion (or its timeout), its run has finished or is
    not live, or the value cannot be stored. Nothing was completed."""


class CallbackTimeout(JobError):
    """Raised by awaiting a callback (``await cb``) whose timeout passed
    before it was completed. The expiry is recorded, so every replay of the
    run raises it again at the same place; the job may catch it."""

    def __init__(self, run_id: str, name: str, callback_id: str, expired_at: float) -> None:
        self.run_id = run_id
        self.name = name
        self.callback_id = callback_id
        self.expired_at = expired_at
        super().__init__(
            f"run {run_id}: callback {name!r} ({callback_id}) was not completed before its timeout"
        )


class BadCallback(JobError):
    """A callback's completion that its wait cannot give the run: not JSON,
    not of the type the callback declares (pydantic's message names the
    field), or over the largest body a completion may have
    (:data:`stepstone.records.callbacks.MAX_BODY`).

    The completion is recorded as taken, so every replay would take it again
    and fail alike: uncaught, the attempt fails for good, naming the run, the
    callback (its name and id) and what is wrong."""

    def __init__(self, run_id: str, name: str, callback_id: str, reason: str) -> None:
        self.run_id = run_id
        self.name = name
        self.callback_id = callback_id
        self.reason = reason
        super().__init__(
            f"run {run_id}: the completion of callback {name!r} ({callback_id}) "
            f"cannot be taken: {reason}"
        )


class NonDeterministicReplay(JobError):
    """A replay made another call than its run recorded at that place: the
    job's code changed under a run that had already gone past that point
    (a step renamed, added or removed; a step where a sleep was; a branch
    added or removed). Nothing is run in its place, so no step's side effect
    happens again for a new name: the attempt fails permanently, saying
    where, unless the run was last advanced by code of another version and
    a worker of that version may still come (docs/versioning.md, "Deploying").
    ``ctx.patched`` lets old runs keep the old path.

    ``run_id`` and ``kind`` name the run; ``position`` the place in its
    branch's history (1 for its first call) and ``branch`` the branch
    (``"2.1"``: the first task created by the run's second; ``""``: the
    run's own task); ``recorded`` and ``asked`` the two calls as words;
    ``recorded_by`` the code version that recorded the call, where known."""

    def __init__(
        self,
        run_id: str,
        kind: str,
        position: int,
        recorded: str,
        asked: str,
        *,
        branch: str = "",
        recorded_by: str | None = None,
        waited: float | None = None,
    ) -> None:
        self.run_id = run_id
        self.kind = kind
        self.position = position
        self.recorded = recorded
        self.asked = asked
        self.branch = branch
        self.recorded_by = recorded_by
        self.waited = waited
        """Seconds the run waited for a worker of ``recorded_by``'s version
        before it failed (None: it did not wait)."""
        where = f"position {position}" + (f" of branch {branch}" if branch else "")
        waiting = ""
        if waited is not None:
            waiting = (
                f"; version {recorded_by} recorded it, and no worker of that version "
                f"replayed the run within {waited:g} s"
            )
        super().__init__(
            f"the replay diverged at {where}: the run recorded {recorded}, "
            f"the code now asks for {asked} (run {run_id}, {kind}: its code changed under "
            f"it; ctx.patched keeps old runs on the old path){waiting}"
        )

    def after_waiting(self, seconds: float) -> NonDeterministicReplay:
        """The same divergence, once the run waited ``seconds`` in vain for a
        worker of the version that recorded the call."""
        return NonDeterministicReplay(
            self.run_id,
            self.kind,
            self.position,
            self.recorded,
            self.asked,
            branch=self.branch,
            recorded_by=self.recorded_by,
            waited=seconds,
        )


class JobFailed(JobError):
    """A job's run ended in failure; raised by awaiting its handle.

    ``reason`` says why it stopped (a :class:`~stepstone.FailureKind`:
    ``permanent``, ``exhausted``, ``timeout``, ``unknown``, ``malformed``,
    ``expired``, ``cancelled``), ``message`` is the last error as recorded,
    ``error_type`` the exception's class when there was one.
    """

    def __init__(
        self, run_id: str, reason: str, message: str, error_type: str | None = None
    ) -> None:
        self.run_id = run_id
        self.reason = reason
        self.message = message
        self.error_type = error_type
        super().__init__(f"run {run_id} failed ({reason}): {message}")


class JobCancelled(JobFailed):
    """The job was cancelled before it finished."""


class InspectError(JobError):
    """A request an operator made (``stepstone`` commands, ``runner.runs()``)
    that cannot be done, with the reason to show: no such run, an id prefix
    that names several, a queue that cannot list its jobs."""


class ScheduleRefused(InspectError, LookupError):
    """A schedule action that cannot be done, with why: no schedule of that
    name in the store (nor in the application), a backfill of a schedule the
    application does not define, a range with too many ticks or none, a
    pause's note that is not printable text."""


class ClassifiedPermanent(Permanent):
    """An application error that ``Job.classify`` called permanent.

    Carries the original so the recorded failure names it, not this wrapper.
    """

    def __init__(self, original: BaseException) -> None:
        self.original = original
        try:
            text = str(original)
        except Exception:
            # Wrapping must not fail: the job's own verdict (permanent) would
            # be lost with it, and the __str__'s error recorded instead.
            text = f"<unprintable {type(original).__name__}>"
        super().__init__(text)


def _shown_key(key: str) -> str:
    """An idempotency key in a message: quoted, and cut short past 120 characters."""
    return repr(key if len(key) <= 120 else key[:117] + "...")


class DebounceBacklog(JobError):
    """A debounced submit found no open window of its key and too many
    windows waiting for their runs already (no worker takes them?)."""
