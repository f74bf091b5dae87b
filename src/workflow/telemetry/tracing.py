"""Traces of runs and steps, and the scope an attempt runs in.

With the ``otel`` extra installed, every attempt of a job is a span
(``stepstone.job <kind>``) and every step inside it a child span
(``stepstone.step <name>``), on the globally configured TracerProvider or
the one given to :func:`use_tracer_provider`. Without opentelemetry the
hooks cost one failed import, once. :func:`job_scope` also sets the log
context of :mod:`stepstone.telemetry.logs`, and :func:`step_scope` records
a step's duration when metrics are on (:mod:`stepstone.telemetry.metrics`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sized
from typing import Any

from stepstone.runtime.worker import Attempt
from stepstone.telemetry.logs import JobLogContext, entering, leaving
from stepstone.telemetry.metrics import record_step, step_timer

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
    :func:`use_tracer_provider` nor set globally): a no-op span still costs
    time on every step. A global provider set later is picked up
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
def job_scope(kind: str, attempt: Attempt) -> Iterator[None]:
    """Around one attempt of a job: the log context, and a span when tracing is on.

    The span records the exception a failed attempt raises (OpenTelemetry's
    ``start_as_current_span`` does so and sets the status to ERROR).
    """
    delivery = attempt.delivery
    token = entering(JobLogContext(delivery.id, kind, delivery.attempt))
    try:
        tracer = _get_tracer()
        if tracer is None:
            yield
            return
        attributes = {
            "stepstone.run.id": delivery.id,
            "stepstone.job.kind": kind,
            "stepstone.job.attempt": delivery.attempt,
            "stepstone.job.max_attempts": delivery.max_attempts,
        }
        with tracer.start_as_current_span(f"stepstone.job {kind}", attributes=attributes):
            yield
    finally:
        leaving(token)


_NO_SPAN: contextlib.AbstractContextManager[None] = contextlib.nullcontext()


def step_scope(
    run_id: str, kind: str, name: str, replayed: Sized
) -> contextlib.AbstractContextManager[None]:
    """Around one ``ctx.step``: a child span saying whether it ran or replayed
    (``replayed``, the run's record of replayed steps, grew while it ran), and
    the step's duration when metrics are on (:mod:`stepstone.telemetry.metrics`).

    With neither a tracer nor metrics this is a shared no-op (a generator-based
    context manager per step would cost more than the rest of the step's
    bookkeeping)."""
    tracer = _get_tracer()
    timer = step_timer()
    if tracer is None and timer is None:
        return _NO_SPAN
    return _observed_step(tracer, timer, run_id, kind, name, replayed)


@contextlib.contextmanager
def _observed_step(
    tracer: Any, timer: Any, run_id: str, kind: str, name: str, replayed: Sized
) -> Iterator[None]:
    replayed_before = len(replayed)
    started = time.perf_counter()
    try:
        if tracer is None:
            yield
            return
        attributes = {"stepstone.step.name": name, "stepstone.run.id": run_id}
        with tracer.start_as_current_span(f"stepstone.step {name}", attributes=attributes) as span:
            yield
            span.set_attribute("stepstone.step.replayed", len(replayed) > replayed_before)
    finally:
        if timer is not None and len(replayed) == replayed_before:
            record_step(timer, kind, name, time.perf_counter() - started)
