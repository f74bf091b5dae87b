"""Metrics through OpenTelemetry: each claim and attempt counted, steps timed,
in-flight jobs and the queue's depth read when a reader collects; nothing at
all when no MeterProvider is set."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from stepstone import Job, JobContext, JobRunner, Permanent
from stepstone.telemetry.metrics import (
    OTHER,
    STEP_NAMES,
    RunnerMetrics,
    metrics_enabled,
    step_timer,
    use_meter_provider,
)
from stepstone.testing import fail_once, wait_until

pytest.importorskip("opentelemetry.sdk", reason="metrics need the otel extra")
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader


async def fetch(order: str) -> str:
    return f"fetched {order}"


async def charge(order: str) -> str:
    return f"charged {order}"


flaky_charge = fail_once(charge)


class Pay(Job[str]):
    NAME: ClassVar[str] = "m.pay"
    order: str

    async def run(self, ctx: JobContext) -> str:
        await ctx.step("fetch", fetch, self.order)
        return await ctx.step("charge", flaky_charge, self.order)


class Refuse(Job[None]):
    NAME: ClassVar[str] = "m.refuse"

    async def run(self, ctx: JobContext) -> None:
        raise Permanent("card declined")


class Nap(Job[str]):
    NAME: ClassVar[str] = "m.nap"

    async def run(self, ctx: JobContext) -> str:
        # Long enough to outlast recording it on a loaded machine: a sleep
        # already over once its wake time is recorded goes on at once, in
        # the same claim, and the test counts two.
        await ctx.sleep(0.5)
        return "rested"


class Hold(Job[str]):
    NAME: ClassVar[str] = "m.hold"
    gate: ClassVar[asyncio.Event]

    async def run(self, ctx: JobContext) -> str:
        await Hold.gate.wait()
        return "released"


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    use_meter_provider(provider)
    flaky_charge.reset()
    try:
        yield reader
    finally:
        use_meter_provider(None)
        provider.shutdown()


Points = dict[str, list[tuple[dict[str, Any], Any]]]


async def collect(reader: InMemoryMetricReader) -> Points:
    """Every data point by metric name: (attributes, value or (count, sum)).
    Collected in a thread, as an exporter or a scrape would."""
    data = await asyncio.to_thread(reader.get_metrics_data)
    points: Points = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    if value is None:
                        value = (point.count, point.sum)
                    points.setdefault(metric.name, []).append((dict(point.attributes), value))
    return points


def total(points: Points, name: str, **attributes: str) -> Any:
    """The sum of ``name``'s points whose attributes include ``attributes``
    (histograms: their counts)."""
    found = 0
    for have, value in points.get(name, []):
        if attributes.items() <= have.items():
            found += value[0] if isinstance(value, tuple) else value
    return found


async def test_attempts_are_counted_by_how_they_ended(reader: InMemoryMetricReader) -> None:
    runner = JobRunner("memory://", jobs=[Pay, Refuse, Nap], retry_backoff=0.0)
    async with runner:
        observer = runner.worker.observer
        assert isinstance(observer, RunnerMetrics) and observer.recording
        assert await (await runner.submit(Pay(order="o-1"))).result(timeout=10) == "charged o-1"
        refused = await (await runner.submit(Refuse())).join(timeout=10)
        assert not refused.ok
        assert await (await runner.submit(Nap())).result(timeout=10) == "rested"
        # An outcome is recorded before the job is acked and counted.
        await wait_until(
            lambda: runner.worker.stats.succeeded + runner.worker.stats.dead == 3, timeout=10
        )
        points = await collect(reader)

    name = "stepstone.job.kind"
    assert total(points, "stepstone.job.claimed", **{name: "m.pay"}) == 2
    assert total(points, "stepstone.job.claimed", **{name: "m.nap"}) == 2
    assert total(points, "stepstone.job.claimed") == 5
    assert total(points, "stepstone.job.succeeded") == 2
    assert total(points, "stepstone.job.retried", **{name: "m.pay"}) == 1
    injected = {name: "m.pay", "error.type": "stepstone.testing.InjectedFailure"}
    assert total(points, "stepstone.job.failed", **injected) == 1
    permanent = {name: "m.refuse", "error.type": "stepstone.runtime.errors.Permanent"}
    assert total(points, "stepstone.job.failed", **permanent) == 1
    assert total(points, "stepstone.job.dead", **permanent) == 1
    assert total(points, "stepstone.job.suspended", **{name: "m.nap"}) == 1
    # One duration per attempt, by how it ended; a start latency per run.
    assert total(points, "stepstone.job.duration") == 5
    assert total(points, "stepstone.job.duration", **{"stepstone.job.result": "retried"}) == 1
    assert total(points, "stepstone.job.start_latency") == 3
    # Steps that ran are timed; the retry's replay of "fetch" is not.
    step = "stepstone.step.name"
    assert total(points, "stepstone.step.duration", **{name: "m.pay", step: "fetch"}) == 1
    assert total(points, "stepstone.step.duration", **{name: "m.pay", step: "charge"}) == 2
    assert total(points, "stepstone.job.in_flight") == 0
    assert total(points, "stepstone.queue.depth", **{"stepstone.job.status": "dead"}) == 1
    assert total(points, "stepstone.queue.depth") == 1


async def test_in_flight_and_queue_depth_are_read_when_collected(
    reader: InMemoryMetricReader,
) -> None:
    Hold.gate = asyncio.Event()
    runner = JobRunner("memory://", jobs=[Hold], concurrency=1)
    async with runner:
        held = [await runner.submit(Hold()) for _ in range(3)]
        await wait_until(lambda: runner.worker.in_flight == 1)
        points = await collect(reader)
        assert total(points, "stepstone.job.in_flight", **{"stepstone.job.kind": "m.hold"}) == 1
        assert total(points, "stepstone.queue.depth", **{"stepstone.job.status": "running"}) == 1
        assert total(points, "stepstone.queue.depth", **{"stepstone.job.status": "ready"}) == 2
        Hold.gate.set()
        for handle in held:
            assert await handle.result(timeout=10) == "released"


def test_without_a_meter_provider_a_runner_records_nothing() -> None:
    """No provider: the worker's observer records nothing and steps get no
    timer, so a job pays for next to nothing (the benchmark's figure:
    docs/observability.md)."""
    from opentelemetry import metrics

    if type(metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider":
        pytest.skip("a global MeterProvider is configured in this process")
    use_meter_provider(None)
    assert not metrics_enabled()

    async def start_and_look() -> tuple[object, object]:
        runner = JobRunner("memory://")
        async with runner:
            return runner._metrics.recording, step_timer()

    assert asyncio.run(start_and_look()) == (False, None)


KIND = "stepstone.job.kind"


class ManySteps(Job[int]):
    """A job that names its steps by what they work on (a page each)."""

    NAME: ClassVar[str] = "m.many_steps"
    pages: int

    async def run(self, ctx: JobContext) -> int:
        for page in range(self.pages):
            await ctx.step(f"page-{page}", fetch, str(page))
        return self.pages


async def test_step_names_are_a_bounded_label_set(reader: InMemoryMetricReader) -> None:
    """300 distinct step names give at most ``STEP_NAMES.limit`` series and
    one ``_other`` for the rest: a metrics page never grows with what jobs
    call their steps; every step is still counted."""
    pages = STEP_NAMES.limit + 100
    async with JobRunner("memory://", jobs=[ManySteps]) as runner:
        assert await (await runner.submit(ManySteps(pages=pages))).result(timeout=60) == pages
        points = await collect(reader)
    mine = [have for have, _ in points["stepstone.step.duration"] if have[KIND] == "m.many_steps"]
    names = {have["stepstone.step.name"] for have in mine}
    assert OTHER in names
    assert len(names) <= STEP_NAMES.limit + 1
    assert total(points, "stepstone.step.duration", **{KIND: "m.many_steps"}) == pages


class Quick(Job[str]):
    NAME: ClassVar[str] = "m.quick"

    async def run(self, ctx: JobContext) -> str:
        return f"attempt {ctx.attempt}"


async def test_a_takeover_of_a_lapsed_lease_is_counted_as_a_lapse_not_an_attempt(
    reader: InMemoryMetricReader,
) -> None:
    """A worker died holding the run (its claim is made here by hand); the
    next takes it over once the lease lapses. Metrics, the outcome and the
    run's status count the same: one attempt, one lapse."""
    from stepstone.runtime import FakeClock
    from stepstone.store import MemoryStore

    clock = FakeClock()
    store = MemoryStore(clock=clock.now)
    submitter = JobRunner(store, clock=clock)
    handle = await submitter.submit(Quick())
    [died] = await submitter.queue.claim(1, lease=10.0)  # a worker that then died
    clock.advance(11.0)
    async with JobRunner(store, jobs=[Quick], clock=clock, poll_interval=0.01) as runner:
        outcome = await runner.handle(handle.id, Quick).join(timeout=10)
        await wait_until(lambda: runner.worker.stats.succeeded == 1, timeout=10)
        points = await collect(reader)
        state = await runner.status(handle.id)
    assert died.attempt == 1
    assert (outcome.result, outcome.attempts, outcome.lapses) == ("attempt 1", 1, 1)
    assert state is not None and (state.attempts, state.lapses) == (1, 1)
    kind = {"stepstone.job.kind": "m.quick"}
    assert total(points, "stepstone.job.claimed", **kind) == 1
    assert total(points, "stepstone.job.lapsed", **kind) == 1
