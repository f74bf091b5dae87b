"""Attempt history: every claim of a run, who made it, when, and how it ended.

What is stored, and what it costs:

- **The claim that settles a run** (it succeeded, or failed for good) is
  described by the outcome record, which carries its claim number, its
  worker and when it was claimed (:class:`OutcomeRecord`): no request more.
- **Every other claim** (a failure that is retried, an attempt handed back
  uncounted, a durable sleep or wait, a drain, a lost lease, a claim that
  found the outcome already recorded) writes one small object when it ends,
  create-if-absent::

      attempts/<run_id>/<incarnation>/<claim>

  ``JobRunner(history=False)`` writes none of these.
- **A claim whose worker stopped** (a crash, a lease that lapsed) before it
  ended leaves nothing: a gap in the claim numbers, which reads as
  :attr:`AttemptResult.UNRECORDED`.

So a run that succeeds on its first attempt costs nothing here; one that
fails twice and then succeeds, two PUTs. Reading a run's history is a LIST
and a GET per object, beside the outcome and queue record (which say which
incarnation is the run's). Retention and purge remove it with the run.

Claim numbers key the records: every claim runs one attempt, a line of the
history, while the attempt *number* counts only the attempts spent, so a
suspended run's claims share one (a durable sleep spends none). Each record
has both numbers, and how the claim ended, an :class:`AttemptResult`.
"""

from __future__ import annotations

from dataclasses import dataclass

from stepstone.records.codec import pack, unpack
from stepstone.records.outcome import OutcomeRecord
from stepstone.runtime import plausible
from stepstone.runtime.decision import AttemptResult
from stepstone.runtime.status import JobStatus

__all__ = ["AttemptInfo", "AttemptResult", "decode", "encode", "final_attempt"]

HISTORY_VERSION = 1


@dataclass(frozen=True, slots=True)
class AttemptInfo:
    """One claim of a run: ``runner.history(run_id)`` lists them in order."""

    claim: int | None
    """The claim's number: 1 for the run's first, counting every claim,
    suspensions and drains included. (None only for the last claim of a run
    recorded by an older release of stepstone.)"""
    number: int | None
    """The attempt it was: attempts count failures, so the claims of a
    suspended run share one. None for an unrecorded claim."""
    result: AttemptResult
    claimed_at: float | None = None
    """When the worker claimed it (epoch seconds, the worker's clock)."""
    ended_at: float | None = None
    worker: str | None = None
    """The worker's id (``worker-<hex>``, also in its log lines)."""
    host: str | None = None
    pid: int | None = None
    error_type: str | None = None
    """The exception's qualified class name, when an error ended it."""
    message: str | None = None
    """The error (``ExcType: text``), or what it waits for when suspended."""
    traceback: str | None = None
    """Where the error was raised: its last frames, at most 8,000 characters."""

    @property
    def seconds(self) -> float | None:
        """How long the claim lasted, when both ends are known."""
        if self.claimed_at is None or self.ended_at is None:
            return None
        return max(0.0, self.ended_at - self.claimed_at)


def encode(info: AttemptInfo) -> bytes:
    return pack(
        {
            "v": HISTORY_VERSION,
            "claim": info.claim,
            "attempt": info.number,
            "result": info.result.value,
            "claimed_at": info.claimed_at,
            "ended_at": info.ended_at,
            "worker": [info.host, info.pid, info.worker],
            "error_type": info.error_type,
            "message": info.message,
            "traceback": info.traceback,
        }
    )


def decode(data: bytes) -> AttemptInfo:
    """The record ``data`` holds; ValueError saying what is wrong otherwise
    (a time, claim or attempt number that could not be real included:
    :mod:`stepstone.runtime.plausible`)."""
    try:
        raw = unpack(data)
    except Exception as exc:
        raise ValueError(f"not a MessagePack document ({type(exc).__name__}: {exc})") from exc
    if not isinstance(raw, dict) or raw.get("v") != HISTORY_VERSION:
        raise ValueError("not an attempt record of a version this library reads")
    try:
        host, pid, worker = raw["worker"]
        info = AttemptInfo(
            claim=plausible.count(raw["claim"], "claim", least=1),
            number=plausible.optional_count(raw["attempt"], "attempt"),
            result=AttemptResult(raw["result"]),
            claimed_at=plausible.optional_time(raw["claimed_at"], "claimed_at"),
            ended_at=plausible.optional_time(raw["ended_at"], "ended_at"),
            worker=worker,
            host=host,
            pid=plausible.optional_count(pid, "pid", most=2**31),
            error_type=raw["error_type"],
            message=raw["message"],
            traceback=raw["traceback"],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"a field is missing or malformed ({type(exc).__name__}: {exc})") from exc
    texts = (info.worker, info.host, info.error_type, info.message, info.traceback)
    if not all(text is None or isinstance(text, str) for text in texts):
        raise ValueError("a field has the wrong type")
    return info


def final_attempt(outcome: OutcomeRecord) -> AttemptInfo | None:
    """The claim that recorded ``outcome``, as its record describes it; None
    for a cancelled run (a cancel is no claim)."""
    if outcome.status is JobStatus.CANCELLED:
        return None
    host, pid, worker = outcome.worker if outcome.worker is not None else (None, None, None)
    error = outcome.error
    return AttemptInfo(
        claim=outcome.claims,
        number=outcome.attempts,
        result=AttemptResult.SUCCEEDED
        if outcome.status is JobStatus.SUCCEEDED
        else AttemptResult.DEAD,
        claimed_at=outcome.claimed_at,
        ended_at=outcome.finished_at,
        worker=worker,
        host=host,
        pid=pid,
        error_type=None if error is None else error.error_type,
        message=None if error is None else f"{error.reason}: {error.message}",
        traceback=None if error is None else error.traceback,
    )
