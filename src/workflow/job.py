"""Job: a typed input with a ``run`` method, and what the runner reads off it.

A job type is a pydantic model, so its input is validated when it is built
and stored as canonical JSON; generic over its output type, so
``await handle`` is typed. Everything else a runner needs (its NAME, its
idempotency key, how it classifies errors) is a class attribute or method
with a sensible default.
"""

from __future__ import annotations

import hashlib
import inspect
import typing
import weakref
from collections.abc import Awaitable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict

from stepstone.errors import Permanent
from stepstone.limits.rate import RateLimit
from stepstone.records.codec import canonical_input
from stepstone.records.layout import check_run_id, run_id_for_key

if TYPE_CHECKING:
    from stepstone.records.outcome import Outcome

Out = TypeVar("Out")


class ErrorClass(StrEnum):
    """What ``Job.classify`` says of an error: worth a retry (``TRANSIENT``) or
    not (``PERMANENT``, the run fails at once)."""

    PERMANENT = "permanent"
    TRANSIENT = "transient"


class Singleton(StrEnum):
    """What a submit of a singleton key (``Job.singleton``) does when a run
    of the key is live (submitted, and not yet ended)."""

    QUEUE = "queue"
    """Its run waits in line for the key (a concurrency key of 1)."""
    SKIP = "skip"
    """No new run: the submit joins the live run, whose outcome its handle answers."""
    CANCEL_RUNNING = "cancel_running"
    """The live run is cancelled, and the new run starts once its code has stopped."""
    SKIP_NEWEST = "skip_newest"
    """The new run is recorded cancelled at once, without running, its
    error naming the live run; the live run goes on."""


class Job(BaseModel, Generic[Out]):
    """Subclass with fields for the input and a ``run`` method.

    >>> class Add(Job[int]):
    ...     a: int
    ...     b: int
    ...     async def run(self, ctx: JobContext) -> int:
    ...         return self.a + self.b
    """

    # Bytes fields travel as base64 in the canonical JSON, so any bytes survive.
    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64", frozen=False)

    NAME: ClassVar[str]
    """The name the job is stored and routed under. Defaults to ``module.QualName``;
    set it explicitly so renaming or moving the class does not orphan queued jobs."""

    max_attempts: ClassVar[int | None] = None
    """Attempts in total, the first included; None takes the runner's default.
    An attempt is spent by the run's own code (an error, a timeout), never by
    a worker that dies or hangs under it (that is a lapse: ``JobRunner(max_lapses=)``)."""

    attempt_timeout: ClassVar[float | None] = None
    """Seconds one attempt may run before it is cancelled and counted as failed
    (kind ``timeout`` on the last attempt); None takes the runner's default."""

    lease: ClassVar[float | None] = None
    """Seconds of lease this job type's attempts hold, renewed every third of
    it, where the runner's (10 s by default) is too short: a run whose code
    may hold the event loop (an async ``run`` computing for seconds without
    an ``await``) longer than two thirds of the lease would be taken over by
    another worker while it runs. A longer lease costs one more request per
    attempt, and a dead worker's runs of this type wait that long to be taken
    over. None takes the runner's."""

    VERSION: ClassVar[str | None] = None
    """The version of this job type's code, recorded with each run submitted
    (``stepstone ls --version``, ``show``, the web view), so an operator can
    tell which runs still need old code. None: not recorded. Change it when a
    change to ``run`` matters to runs in flight (docs/versioning.md)."""

    max_in_flight: ClassVar[int | None] = None
    """At most this many runs of this job type at once in one worker process
    (say, for a small connection pool); None: only the runner's concurrency."""

    concurrency_limit: ClassVar[int] = 1
    """Runs of this type with the same :meth:`concurrency_key` in flight at
    once, across every worker process and machine."""

    singleton: ClassVar[Singleton | None] = None
    """What a submit does when a run of its :meth:`concurrency_key` is live
    (with ``concurrency_limit`` 1, a singleton key): None or
    ``Singleton.QUEUE``, wait in line; ``SKIP``, join the live run;
    ``CANCEL_RUNNING``, cancel it and run; ``SKIP_NEWEST``, end at once,
    cancelled, naming the live run. See docs/concepts.md, "Singleton runs"."""

    rate_limit: ClassVar[RateLimit | None] = None
    """How fast runs of this type may start, across every worker process
    (per :meth:`rate_limit_key` when it gives one); None: as fast as workers take them."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "NAME" not in cls.__dict__:
            cls.NAME = f"{cls.__module__}.{cls.__qualname__}"

    def idempotency_key(self) -> str | None:
        """A key naming the one run this input stands for; None (the default)
        makes every submit a new run. See :func:`payload_idempotency_key`."""
        return None

    def concurrency_key(self) -> str | None:
        """Runs of this type whose keys are equal share ``concurrency_limit``
        slots: a run whose key is full waits (holding no worker, spending no
        attempt) until a slot frees. None (the default): no such limit."""
        return None

    def rate_limit_key(self) -> str | None:
        """With ``rate_limit``: runs whose keys are equal share one rate.
        None (the default): every run of the type shares it."""
        return None

    def classify(self, error: BaseException) -> ErrorClass:
        """Permanent errors go to dead at once; transient ones are retried."""
        if isinstance(error, Permanent):
            return ErrorClass.PERMANENT
        return ErrorClass.TRANSIENT

    def run(self, ctx: Any, /) -> Out | Awaitable[Out]:
        """The job's work. Define it ``async``; a plain ``def`` runs in a thread
        and uses ``ctx.sync`` for steps.

        ``ctx`` is the run's :class:`~stepstone.JobContext`; annotate it so in
        your ``run``. (It is ``Any`` here because a context can submit jobs:
        naming its class here would make this module and the context's import
        each other.)"""
        raise NotImplementedError(f"{type(self).__name__} must define run(self, ctx)")

    def on_settled(self, outcome: Outcome[Out], /) -> Awaitable[None] | None:
        """Called once the run's outcome is recorded (succeeded, failed for
        good, cancelled): for alerts and compensation. Define it ``async`` or
        plain (a plain one runs in a thread), as a method (``self`` is the
        run's input) or a classmethod. At least once per run: it runs again
        when a worker stops between recording the outcome and acking the run;
        what it raises is logged and changes nothing. See :mod:`stepstone.execute.hooks`.
        This default does nothing (and costs nothing: it is not called)."""
        return None

    @classmethod
    def output_type(cls) -> Any:
        """The declared output type: ``run``'s return annotation, else ``Out``."""
        try:
            return _output_types[cls]
        except KeyError:
            pass
        try:
            hints = typing.get_type_hints(cls.run)
        except Exception:
            hints = None  # not resolvable yet (a forward reference): do not cache
        ret = (hints or {}).get("return", inspect.Signature.empty)
        if ret is not inspect.Signature.empty and typing.get_origin(ret) is not typing.Union:
            output = ret
        else:
            output = Any
            for klass in cls.__mro__:
                meta = getattr(klass, "__pydantic_generic_metadata__", None)
                if meta and meta.get("origin") is Job and meta.get("args"):
                    output = meta["args"][0]
                    break
        if hints is not None:
            _output_types[cls] = output
        return output

    @classmethod
    def is_async(cls) -> bool:
        """Whether ``run`` is ``async def`` (a ``def run`` runs in a thread, with
        ``ctx.sync``)."""
        return inspect.iscoroutinefunction(cls.run)


_output_types: weakref.WeakKeyDictionary[type, Any] = weakref.WeakKeyDictionary()
"""Job.output_type per class: reading type hints evaluates string annotations,
which cost more than the rest of a submit."""


def payload_idempotency_key(job: Job[Any]) -> str:
    """``"{NAME}:{sha256 of the canonical input}"``: the same input, the same key.

    For jobs whose input alone identifies the work (content-addressed dedup)::

        def idempotency_key(self) -> str:
            return payload_idempotency_key(self)
    """
    return f"{job.NAME}:{hashlib.sha256(canonical_input(job)).hexdigest()}"


@dataclass(frozen=True, slots=True)
class IdempotencyKey:
    """A run named by the idempotency key it was submitted with: what an
    application knows (an order's or a document's id), where it does not
    keep the run id. Every runner method that takes a run takes one, from
    any process, without the job's input::

        run = IdempotencyKey(f"charge:{order_id}")
        await runner.status(run)
        await runner.send_event(run, "approved", {"by": "ada"})
        result = await runner.handle(run, ChargeOrder)

    Keys are one namespace across job types (the run id is the SHA-256 of
    the key alone), so a key names one run whatever its type: put the type
    in the key (``"charge:" + order_id``) where two types could share one.
    """

    key: str
    """The idempotency key, as ``Job.idempotency_key()`` returned it."""

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise TypeError(f"an idempotency key is a non-empty str, not {self.key!r}")

    @property
    def run_id(self) -> str:
        """The id of the run the key names (the hex SHA-256 of the key)."""
        return run_id_for_key(self.key)


RunRef: TypeAlias = str | Job[Any] | IdempotencyKey
"""How a runner method is told which run: its run id, a job with an
idempotency key (which names its run), or :class:`IdempotencyKey`."""


def run_id_of(run: RunRef) -> str:
    """The id of the run ``run`` names: a run id (checked), a job with an
    idempotency key or an :class:`IdempotencyKey` (the SHA-256 of the key).
    Raises InvalidRunId for a string that is not a run id, TypeError for a
    job with no key (it names no run)."""
    if isinstance(run, IdempotencyKey):
        return run.run_id
    if isinstance(run, Job):
        key = run.idempotency_key()
        if key is None:
            raise TypeError(
                f"{type(run).__qualname__} has no idempotency key, so an instance "
                "does not name a run: pass the run id (handle.id)"
            )
        return run_id_for_key(key)
    return check_run_id(run)
