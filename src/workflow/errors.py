"""The errors a user of the job API catches.

``JobFailed`` is what awaiting a failed job raises; the rest are refusals at
the call site, each naming what is wrong. ``Permanent`` is the one a job
raises itself, to say a retry would fail the same way.
"""

from __future__ import annotations

from stepstone.runtime.errors import PermanentError

Permanent = PermanentError
"""Raise (or subclass) this in a job to fail it at once, without retries."""


class WorkflowError(Exception):
    """Base class of the job API's own errors."""


class InputMismatch(WorkflowError):
    """A job was submitted with an idempotency key already used for a different input.

    The key names one run; a different payload under it is almost always a bug
    in how the caller derives keys, so it is refused rather than answered with
    the other input's result.
    """

    def __init__(self, job_id: str, job_name: str = "") -> None:
        self.job_id = job_id
        self.job_name = job_name
        what = f"job {job_name!r}" if job_name else "a job"
        super().__init__(
            f"{what} was submitted with an idempotency key already used for a different "
            f"input (run {job_id})"
        )


class EncodingError(WorkflowError, ValueError):
    """A job input, step result or job result that cannot be stored.

    At submit it is raised to the caller; at run time the attempt fails
    permanently with this as its message.
    """

    def __init__(self, message: str, *, job: str, step: str | None = None) -> None:
        self.job = job
        self.step = step
        where = f"job {job!r}" + (f", step {step!r}" if step is not None else "")
        super().__init__(f"{where}: {message}")


class DuplicateJobName(WorkflowError, ValueError):
    """Two job types registered on one runner share a NAME."""


class UnknownJob(WorkflowError, LookupError):
    """No job type with this NAME is registered on the runner."""


class JobFailed(WorkflowError):
    """A job's run ended in failure; raised by awaiting its handle.

    ``kind`` says why it stopped (``permanent``, ``exhausted``, ``timeout``,
    ``unknown``, ``malformed``, ``expired``, ``cancelled``), ``message`` is the
    last error as recorded, ``error_type`` the exception's class when there was one.
    """

    def __init__(self, job_id: str, kind: str, message: str, error_type: str | None = None) -> None:
        self.job_id = job_id
        self.kind = kind
        self.message = message
        self.error_type = error_type
        super().__init__(f"job {job_id} failed ({kind}): {message}")


class JobCancelled(JobFailed):
    """The job was cancelled before it finished."""


class ClassifiedPermanent(PermanentError):
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
