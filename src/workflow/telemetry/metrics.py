"""Metrics through OpenTelemetry: what a fleet of workers did, as numbers.

With the ``otel`` extra installed and a MeterProvider configured (set
globally with ``opentelemetry.metrics.set_meter_provider``, or given to
:func:`use_meter_provider`) when a runner starts, its worker counts every
claim and every attempt's end, times each attempt and each step, and reports
the jobs in flight and the queue's depth by state when a reader collects.
``stepstone worker --metrics-port N`` sets one up that serves the Prometheus
text format (:mod:`stepstone.telemetry.prometheus`). docs/observability.md lists
every instrument with its unit and attributes.

Off costs next to nothing per job: a runner that starts with no provider
has its observer return at once (:mod:`stepstone.runtime.observer`), and a
step looks at one module global. Without opentelemetry installed the check is one failed
import, once.

Every label's values are bounded (:class:`LabelValues`): a series per step
name would grow without end for a job that names its steps by what it
works on (``page-17``), and a metrics page never forgets a series. The
first values of a label are kept as they are, any new one past its limit is
counted under ``OTHER``.

What a reader sees depends on when it asks, never on a job: the jobs in
flight are read from the worker at collection, and the queue's depth is
counted then (at most once per ``QUEUE_DEPTH_MAX_AGE`` seconds; a
StoreQueue's count is a LIST per thousand queue records).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from stepstone.runtime.capabilities import JobCounts
from stepstone.runtime.clock import Clock
from stepstone.runtime.decision import AttemptResult
from stepstone.runtime.observer import AttemptReport
from stepstone.runtime.queue import Delivery, LeaseQueue
from stepstone.runtime.status import JobStatus

QUEUE_DEPTH_MAX_AGE = 5.0
"""Seconds a count of the queue is reused for: readers collecting more often
(several exporters, a fast scrape) do not list the queue more often."""
QUEUE_DEPTH_TIMEOUT = 10.0
"""Longest a collection waits for the queue to be counted; past it the last
count is reported (or none)."""

DURATION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
)  # fmt: skip
"""Histogram bucket bounds in seconds: OpenTelemetry's advice for durations
in seconds (5 ms to 10 s), extended to an hour for jobs that take that long."""

OTHER = "_other"
"""The value a label takes for any value past its limit (:class:`LabelValues`)."""


class LabelValues:
    """The values one label takes in a process: the first ``limit`` distinct
    ones as they are, any other as ``OTHER``. Thread-safe (steps of
    synchronous jobs are timed in their threads)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._kept: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        if value in self._kept:
            return value
        with self._lock:
            if len(self._kept) < self.limit:
                self._kept.add(value)
                return value
        return OTHER


KINDS = LabelValues(100)
"""Job kinds a process's metrics name (a worker runs the kinds it registered;
a queue record of any other is counted as it is claimed)."""
STEP_NAMES = LabelValues(200)
"""Step names a process's metrics name."""
ERROR_TYPES = LabelValues(100)
"""Exception classes a process's metrics name."""

JOB_KIND = "stepstone.job.kind"
STEP_NAME = "stepstone.step.name"
RESULT = "stepstone.job.result"
STATUS = "stepstone.job.status"
ERROR_TYPE = "error.type"

_RESULTS = {
    AttemptResult.SUCCEEDED: "succeeded",
    AttemptResult.FAILED: "retried",
    AttemptResult.DEFERRED: "retried",
}
"""The ``stepstone.job.result`` of a claim by how it ended, where it is not the
:class:`AttemptResult`'s own value: a retry counts one, spent or not."""

_UNSET: Any = object()
_provider: Any = None
_instruments: Any = _UNSET
"""The instruments on the current provider: _Instruments, None (metrics off),
or _UNSET (not looked for since the provider last changed)."""
_lock = threading.Lock()


def use_meter_provider(provider: Any) -> None:
    """Record stepstone's metrics on ``provider`` (an opentelemetry MeterProvider)
    instead of the global one; None goes back to the global one. Runners that
    start afterwards use it; a running runner keeps what it had."""
    global _provider, _instruments
    with _lock:
        _provider = provider
        _instruments = _UNSET


def _current() -> _Instruments | None:
    """The instruments, or None when metrics are off: opentelemetry is not
    installed, or no MeterProvider is given nor set globally."""
    global _instruments
    with _lock:
        if _instruments is _UNSET:
            _instruments = _look_for_provider()
        found: _Instruments | None = _instruments
        return found


def _look_for_provider() -> _Instruments | None:
    provider = _provider
    if provider is None:
        try:
            from opentelemetry import metrics
        except ImportError:
            return None
        provider = metrics.get_meter_provider()
        # Unset, the global provider is a proxy (opentelemetry's private
        # _ProxyMeterProvider), or by configuration a no-op: instruments on it
        # would cost per job and record nothing.
        unset = type(provider).__name__ == "_ProxyMeterProvider"
        if unset or isinstance(provider, metrics.NoOpMeterProvider):
            return None
    return _Instruments(provider.get_meter("stepstone"))


def meter_provider(*readers: Any) -> Any:
    """A MeterProvider for stepstone's metrics, as ``stepstone worker`` makes one:
    the SDK's with ``readers`` and exemplars off (sampling an exemplar adds a
    cost to every record, and the Prometheus text format has no place for
    them). Needs opentelemetry-sdk."""
    from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider

    return MeterProvider(metric_readers=list(readers), exemplar_filter=AlwaysOffExemplarFilter())


def metrics_enabled() -> bool:
    """Whether a runner starting now would record metrics."""
    return _current() is not None


class _Instruments:
    """Every instrument, made once per provider, and the runners they observe."""

    def __init__(self, meter: Any) -> None:
        self.runners: dict[int, RunnerMetrics] = {}

        def counter(name: str, unit: str, description: str) -> Any:
            return meter.create_counter(name, unit=unit, description=description)

        def histogram(name: str, description: str) -> Any:
            return meter.create_histogram(
                name,
                unit="s",
                description=description,
                explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
            )

        self.claimed = counter(
            "stepstone.job.claimed",
            "{claim}",
            "Claims a worker made: an attempt started, resumed after a wait, or taken over.",
        )
        self.lapsed = counter(
            "stepstone.job.lapsed",
            "{lease}",
            "Claims that took over a lease that lapsed (its worker died or hung): "
            "a lapse, which costs the run no attempt.",
        )
        self.failed = counter(
            "stepstone.job.failed",
            "{attempt}",
            "Attempts that ended in an error, whether retried or dead.",
        )
        self.ended = {
            "succeeded": counter(
                "stepstone.job.succeeded", "{run}", "Runs that succeeded (acked)."
            ),
            "retried": counter(
                "stepstone.job.retried", "{attempt}", "Attempts sent back to run again."
            ),
            "dead": counter(
                "stepstone.job.dead", "{run}", "Runs that failed for good (dead-lettered)."
            ),
            "suspended": counter(
                "stepstone.job.suspended",
                "{attempt}",
                "Attempts that suspended the run (a durable sleep or wait).",
            ),
            "released": counter(
                "stepstone.job.released",
                "{attempt}",
                "Attempts cut short by a shutdown and given back uncounted.",
            ),
            "lost": counter(
                "stepstone.job.lost",
                "{attempt}",
                "Attempts whose lease was lost: another worker may have the job.",
            ),
        }
        self.duration = histogram(
            "stepstone.job.duration", "How long one attempt held its worker, claim to settled."
        )
        self.start_latency = histogram(
            "stepstone.job.start_latency", "From submit to the first claim of the run."
        )
        self.step_duration = histogram(
            "stepstone.step.duration", "How long a step's function ran (replays are not timed)."
        )
        meter.create_observable_up_down_counter(
            "stepstone.job.in_flight",
            callbacks=[self._observe_in_flight],
            unit="{job}",
            description="Jobs a worker is running now.",
        )
        meter.create_observable_up_down_counter(
            "stepstone.queue.depth",
            callbacks=[self._observe_depth],
            unit="{job}",
            description="Jobs in the queue by state, as counted at collection.",
        )

    def _observe_in_flight(self, options: Any) -> Iterator[Any]:
        from opentelemetry.metrics import Observation

        totals: dict[str, int] = {}
        for runner in list(self.runners.values()):
            for kind, n in runner.in_flight_by_kind().items():
                label = KINDS(kind)
                totals[label] = totals.get(label, 0) + n
        # A job type whose last job ended reports 0, not nothing: a series
        # that stops would keep its last value on a dashboard.
        for runner in list(self.runners.values()):
            for kind in runner.kinds_seen:
                totals.setdefault(kind, 0)
        for kind, n in totals.items():
            yield Observation(n, {JOB_KIND: kind})

    def _observe_depth(self, options: Any) -> Iterator[Any]:
        from opentelemetry.metrics import Observation

        seen: set[int] = set()
        for runner in list(self.runners.values()):
            if id(runner.queue) in seen:
                continue
            seen.add(id(runner.queue))
            counts = runner.queue_depth()
            for status, n in (counts or {}).items():
                yield Observation(n, {STATUS: status.value})


class RunnerMetrics:
    """One runner's metrics: its worker's observer, and what readers ask of
    its worker and queue. Made with the runner; it records from ``start``
    (if metrics are on then) to ``stop``."""

    def __init__(self, queue: LeaseQueue, clock: Clock) -> None:
        self.queue = queue
        self._clock = clock
        self._instruments: _Instruments | None = None
        self._in_flight: Callable[[], dict[str, int]] = dict
        self.kinds_seen: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._counts: dict[JobStatus, int] | None = None
        self._counted_at = float("-inf")
        self._counting: asyncio.Future[None] | None = None

    def start(self, in_flight: Callable[[], dict[str, int]]) -> None:
        """Record from now on, if metrics are on (see the module docstring);
        ``in_flight`` counts the worker's jobs in flight by kind."""
        instruments = _current()
        if instruments is None:
            return
        self._in_flight = in_flight
        self._loop = asyncio.get_running_loop()
        self._instruments = instruments
        instruments.runners[id(self)] = self

    def stop(self) -> None:
        """Record no more (the worker stopped)."""
        if self._instruments is not None:
            self._instruments.runners.pop(id(self), None)
            self._instruments = None

    @property
    def recording(self) -> bool:
        """Whether it records now (started, with metrics on)."""
        return self._instruments is not None

    def in_flight_by_kind(self) -> dict[str, int]:
        return self._in_flight()

    # -- the worker's observer ------------------------------------------------

    def claimed(self, delivery: Delivery) -> None:
        instruments = self._instruments
        if instruments is None:
            return
        kind = KINDS(delivery.kind)
        self.kinds_seen.add(kind)
        attributes = {JOB_KIND: kind}
        instruments.claimed.add(1, attributes)
        if delivery.took_over:
            instruments.lapsed.add(1, attributes)
        if delivery.claims == 1 and delivery.enqueued_at > 0:
            waited = self._clock.now() - delivery.enqueued_at
            instruments.start_latency.record(max(0.0, waited), attributes)

    def attempt_over(self, report: AttemptReport) -> None:
        instruments = self._instruments
        if instruments is None:
            return
        kind = KINDS(report.delivery.kind)
        error_type = None if report.error_type is None else ERROR_TYPES(report.error_type)
        attributes = {JOB_KIND: kind}
        if error_type is not None:
            instruments.failed.add(1, {JOB_KIND: kind, ERROR_TYPE: error_type})
        result = _RESULTS.get(report.result, report.result.value)
        ended = instruments.ended.get(result)
        if ended is not None:
            if report.result is AttemptResult.DEAD and error_type is not None:
                attributes = {JOB_KIND: kind, ERROR_TYPE: error_type}
            ended.add(1, attributes)
        instruments.duration.record(report.seconds, {JOB_KIND: kind, RESULT: result})

    # -- what readers ask ----------------------------------------------------------

    def queue_depth(self) -> dict[JobStatus, int] | None:
        """The queue's jobs by state (None: it cannot count them, or not yet).

        Called in the reader's thread (an exporter's, a scrape's): the count
        runs on the runner's loop and is awaited here, up to
        QUEUE_DEPTH_TIMEOUT. Called on the loop itself (a reader collecting
        inside a coroutine), it cannot wait: it starts a count and reports
        the last one.
        """
        queue = self.queue
        if not isinstance(queue, JobCounts):
            return None
        if time.monotonic() - self._counted_at < QUEUE_DEPTH_MAX_AGE:
            return self._counts
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            if self._counting is None or self._counting.done():
                self._counting = asyncio.ensure_future(self._count(queue))
            return self._counts
        loop = self._loop
        if loop is None:
            return self._counts
        with contextlib.suppress(Exception):  # closed loop, timeout, queue error
            asyncio.run_coroutine_threadsafe(self._count(queue), loop).result(QUEUE_DEPTH_TIMEOUT)
        return self._counts

    async def _count(self, queue: JobCounts) -> None:
        self._counts = await queue.counts()
        self._counted_at = time.monotonic()


def step_timer() -> Any:
    """The step-duration histogram, or None when metrics are off (what
    :func:`stepstone.telemetry.tracing.step_scope` asks once per step)."""
    instruments = _instruments
    if instruments is _UNSET or instruments is None:
        return None
    return instruments.step_duration


def record_step(timer: Any, kind: str, step: str, seconds: float) -> None:
    timer.record(seconds, {JOB_KIND: KINDS(kind), STEP_NAME: STEP_NAMES(step)})
