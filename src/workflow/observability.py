"""Logs and traces that say which job they are about.

**Logging.** The engine's records carry ``job_id``, ``job_name`` (the
runtime's say ``run_id`` and ``kind``; they are the same) and ``attempt`` as record
attributes. While a job's handler runs, the same three are also held in a
context variable, so :class:`JobLogFilter` can stamp them onto *any* record
logged inside the job, the application's own included, without the job
passing them around. Install the filter on a handler (``configure_logging``
does, and ``stepstone worker`` calls that); a logger's own filters do not see
records propagated from child loggers, a handler's do.

**Tracing.** With the ``otel`` extra installed, every attempt of a job is a
span (``stepstone.job <NAME>``) and every step inside it a child span
(``stepstone.step <name>``), on the globally configured TracerProvider or the
one given to :func:`use_tracer_provider`. Without opentelemetry the hooks cost
one failed import, once.

**Metrics** (counters and histograms of claims, attempts and steps) are
:mod:`stepstone.metrics`; a step's duration is recorded here, beside its span.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import time
from collections.abc import Iterator, Sized
from dataclasses import dataclass
from typing import Any

from stepstone.runtime.worker import Attempt

from .escaping import escape_controls
from .metrics import record_step, step_timer

JOB_FIELDS = ("job_id", "job_name", "attempt")


@dataclass(frozen=True, slots=True)
class JobLogContext:
    job_id: str
    job_name: str
    attempt: int


_current: contextvars.ContextVar[JobLogContext | None] = contextvars.ContextVar(
    "stepstone_job", default=None
)


def current_job() -> JobLogContext | None:
    """The job whose handler is running in this task (or thread it started), if any."""
    return _current.get()


class JobLogFilter(logging.Filter):
    """Gives every record ``job_id``, ``job_name`` and ``attempt`` attributes.

    From the record's own ``extra`` when the engine passed them (the
    runtime's ``run_id`` counts as ``job_id``, its ``kind`` as ``job_name``),
    else from the job running in the current context, else None, so a format
    string like ``%(job_id)s`` never fails. Never drops a record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        job = _current.get()
        if getattr(record, "job_name", None) is None and getattr(record, "kind", None):
            record.job_name = record.kind  # type: ignore[attr-defined]
        if getattr(record, "job_id", None) is None and getattr(record, "run_id", None):
            record.job_id = record.run_id  # type: ignore[attr-defined]
        if getattr(record, "job_id", None) is None:
            record.job_id = job.job_id if job is not None else None
            if job is not None:
                record.job_name = getattr(record, "job_name", None) or job.job_name
                if getattr(record, "attempt", None) is None:
                    record.attempt = job.attempt
        for name in JOB_FIELDS:
            if not hasattr(record, name):
                setattr(record, name, None)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the job fields, and
    the traceback when there is one. For log pipelines that index fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": record.created,
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in JOB_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                doc[name] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


class TextFormatter(logging.Formatter):
    """:data:`TEXT_FORMAT` lines, with control characters escaped
    (:func:`stepstone.escaping.escape_controls`): a job's error message cannot
    move the cursor, clear the terminal or start a forged line. A record is
    one line; only a traceback below it keeps its line breaks."""

    def __init__(self, fmt: str = TEXT_FORMAT) -> None:
        super().__init__(fmt)

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_controls(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        # A traceback ends with each error's message, a job's text: its line
        # breaks are escaped too, so it cannot start a line of its own.
        text = super().formatException(ei)
        for error in _chain(ei[1]):
            for job_text in (_text_of(error), *getattr(error, "__notes__", ())):
                if isinstance(job_text, str) and job_text and "\n" in job_text:
                    text = text.replace(job_text, escape_controls(job_text))
        return text

    def format(self, record: logging.LogRecord) -> str:
        # The traceback too, formatted here: another handler's formatter may
        # have cached its own in the record, job text unescaped.
        cached = record.exc_text
        if record.exc_info:
            record.exc_text = None
        try:
            return escape_controls(super().format(record), newlines=True)
        finally:
            record.exc_text = cached


def _chain(error: BaseException | None) -> list[BaseException]:
    """``error`` and the errors a traceback prints with it (causes, contexts)."""
    chain: list[BaseException] = []
    while error is not None and all(error is not seen for seen in chain):
        chain.append(error)
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    return chain


def _text_of(error: BaseException) -> str | None:
    try:
        return str(error)
    except Exception:
        return None


def configure_logging(level: str | int = "INFO", *, json_lines: bool = False) -> logging.Handler:
    """A stderr handler on the root logger with :class:`JobLogFilter`, text
    (:class:`TextFormatter`) or JSON lines.

    Returns the handler so a caller can remove it again.
    """
    handler = logging.StreamHandler()
    handler.addFilter(JobLogFilter())
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    return handler


# -- tracing ----------------------------------------------------------------------------

_UNSET: Any = object()
_tracer: Any = _UNSET
_provider: Any = None
_untraced_until = 0.0
"""Until when (monotonic) the last look found no global TracerProvider."""

GLOBAL_PROVIDER_RECHECK = 1.0
"""How often (seconds) to look again for a global TracerProvider set after
start-up. Looking costs an ``os.environ`` lookup inside opentelemetry, on
every job and step; a provider set later starts tracing within this long."""


def use_tracer_provider(provider: Any) -> None:
    """Trace stepstone's spans on ``provider`` (an opentelemetry TracerProvider)
    instead of the global one; None goes back to the global one."""
    global _tracer, _provider, _untraced_until
    _provider = provider
    _tracer = _UNSET
    _untraced_until = 0.0


_trace: Any = None


def _get_tracer() -> Any:
    """The tracer, or None when spans would go nowhere: opentelemetry is not
    installed, or no TracerProvider is configured (neither given to
    :func:`use_tracer_provider` nor set globally). A no-op span still costs
    several microseconds a step; a global provider set later is picked up
    within GLOBAL_PROVIDER_RECHECK seconds (one given to
    :func:`use_tracer_provider`, at once)."""
    global _tracer, _trace, _untraced_until
    if _tracer is _UNSET:
        try:
            from opentelemetry import trace
        except ImportError:
            _tracer = None
        else:
            _trace = trace
            _tracer = trace.get_tracer("stepstone", tracer_provider=_provider)
    if _tracer is not None and _provider is None:
        now = time.monotonic()
        if now < _untraced_until:
            return None
        if isinstance(_trace.get_tracer_provider(), _trace.ProxyTracerProvider):
            _untraced_until = now + GLOBAL_PROVIDER_RECHECK
            return None
    return _tracer


@contextlib.contextmanager
def job_scope(name: str, attempt: Attempt) -> Iterator[None]:
    """Around one attempt of a job: the log context, and a span when tracing is on.

    The span records the exception a failed attempt raises (OpenTelemetry's
    ``start_as_current_span`` does so and sets the status to ERROR).
    """
    delivery = attempt.delivery
    token = _current.set(JobLogContext(delivery.id, name, delivery.attempt))
    try:
        tracer = _get_tracer()
        if tracer is None:
            yield
            return
        attributes = {
            "stepstone.job.id": delivery.id,
            "stepstone.job.name": name,
            "stepstone.job.attempt": delivery.attempt,
            "stepstone.job.max_attempts": delivery.max_attempts,
        }
        with tracer.start_as_current_span(f"stepstone.job {name}", attributes=attributes):
            yield
    finally:
        _current.reset(token)


_NO_SPAN: contextlib.AbstractContextManager[None] = contextlib.nullcontext()


def step_scope(
    job_id: str, job_name: str, name: str, replayed: Sized
) -> contextlib.AbstractContextManager[None]:
    """Around one ``ctx.step``: a child span saying whether it ran or replayed
    (``replayed``, the run's record of replayed steps, grew while it ran), and
    the step's duration when metrics are on (:mod:`stepstone.metrics`).

    With neither a tracer nor metrics this is a shared no-op (a generator-based
    context manager per step would cost more than the rest of the step's
    bookkeeping)."""
    tracer = _get_tracer()
    timer = step_timer()
    if tracer is None and timer is None:
        return _NO_SPAN
    return _observed_step(tracer, timer, job_id, job_name, name, replayed)


@contextlib.contextmanager
def _observed_step(
    tracer: Any, timer: Any, job_id: str, job_name: str, name: str, replayed: Sized
) -> Iterator[None]:
    replayed_before = len(replayed)
    started = time.perf_counter()
    try:
        if tracer is None:
            yield
            return
        attributes = {"stepstone.step.name": name, "stepstone.job.id": job_id}
        with tracer.start_as_current_span(f"stepstone.step {name}", attributes=attributes) as span:
            yield
            span.set_attribute("stepstone.step.replayed", len(replayed) > replayed_before)
    finally:
        if timer is not None and len(replayed) == replayed_before:
            record_step(timer, job_name, name, time.perf_counter() - started)
