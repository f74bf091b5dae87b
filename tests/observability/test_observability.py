"""Every log record about a job says which job and attempt; spans with the otel extra."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from stepstone import Job, JobContext, JobRunner, Permanent
from stepstone.observability import JobLogFilter, JsonFormatter, use_tracer_provider
from stepstone.testing import fail_once, run_job, run_job_outcome, wait_until

app_log = logging.getLogger("app.orders")


def lookup(order: str) -> dict[str, str]:
    app_log.info("looking up %s", order)  # the application's own record, in a thread
    return {"order": order}


flaky_charge_calls: list[int] = []


async def charge(order: str) -> str:
    flaky_charge_calls.append(1)
    app_log.info("charging %s", order)  # the application's own record, in the loop
    return f"receipt-{order}"


flaky_charge = fail_once(charge)


class Charge(Job[str]):
    NAME: ClassVar[str] = "obs.charge"
    order: str

    async def run(self, ctx: JobContext) -> str:
        await ctx.step("lookup", lookup, self.order)
        ctx.progress({"stage": "charging"})
        return await ctx.step("charge", flaky_charge, self.order)


class Refuse(Job[str]):
    NAME: ClassVar[str] = "obs.refuse"

    async def run(self, ctx: JobContext) -> str:
        raise Permanent("refused")


class Waits(Job[str]):
    NAME: ClassVar[str] = "obs.waits"
    gate: ClassVar[asyncio.Event | None] = None

    async def run(self, ctx: JobContext) -> str:
        ctx.progress({"done": 3, "of": 10})
        assert Waits.gate is not None
        await Waits.gate.wait()
        return "done"


class _Capture(logging.Handler):
    """Keeps each record with its attributes as the engine wrote them, before
    JobLogFilter (installed on this handler) fills anything in."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.raw: list[dict[str, Any]] = []
        self.records: list[logging.LogRecord] = []
        self.addFilter(JobLogFilter())

    def handle(self, record: logging.LogRecord) -> bool:
        self.raw.append(dict(record.__dict__))
        return super().handle(record)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def captured() -> Iterator[_Capture]:
    handler = _Capture()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    flaky_charge.reset()
    flaky_charge_calls.clear()


@pytest.mark.stepstone(jobs=[Charge, Refuse])
async def test_every_engine_record_about_a_job_names_the_job_and_attempt(
    stepstone_memory_runner: JobRunner, captured: _Capture
) -> None:
    runner = stepstone_memory_runner
    charged = await run_job_outcome(runner, Charge(order="o-1"))
    assert charged.ok and charged.attempts == 2
    refused = await run_job_outcome(runner, Refuse())
    assert not refused.ok
    names = {charged.id: "obs.charge", refused.id: "obs.refuse"}

    engine = [
        raw
        for raw in captured.raw
        if raw["name"].split(".")[0] == "stepstone"
        and any(job_id in _text(raw) for job_id in names)
    ]
    assert len(engine) >= 6, [r["msg"] for r in captured.raw]
    for raw in engine:
        where = f"{raw['name']}: {_text(raw)!r}"
        job_id = raw.get("job_id") or raw.get("run_id")
        assert job_id in names, f"no job_id on {where}"
        assert (raw.get("job_name") or raw.get("kind")) == names[job_id], where
        if "submitted" not in _text(raw):  # a submit is before any attempt
            assert isinstance(raw.get("attempt"), int) and raw["attempt"] >= 1, where
    attempts = {
        raw.get("attempt") for raw in engine if charged.id in (raw.get("job_id"), raw.get("run_id"))
    }
    assert {1, 2} <= attempts

    # The application's own records inside the job get the job's fields from
    # the filter, in the loop and in the worker thread a sync step runs in.
    own = [r for r in captured.records if r.name == "app.orders"]
    assert {r.getMessage() for r in own} >= {"looking up o-1", "charging o-1"}
    for record in own:
        assert (record.job_id, record.job_name) == (charged.id, "obs.charge")  # type: ignore[attr-defined]
        assert record.attempt in (1, 2)  # type: ignore[attr-defined]
    charging = [r for r in own if r.getMessage() == "charging o-1"]
    assert [r.attempt for r in charging] == [2]  # type: ignore[attr-defined]

    # Outside any job the fields exist and are None, so formats never break.
    plain = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", (), None)
    JobLogFilter().filter(plain)
    assert (plain.job_id, plain.job_name, plain.attempt) == (None, None, None)  # type: ignore[attr-defined]
    line = JsonFormatter().format(own[0])
    assert f'"job_id": "{charged.id}"' in line and '"job_name": "obs.charge"' in line


def _text(raw: dict[str, Any]) -> str:
    try:
        return str(raw["msg"]) % raw["args"] if raw["args"] else str(raw["msg"])
    except (TypeError, ValueError):
        return str(raw["msg"])


@pytest.mark.stepstone(jobs=[Waits])
async def test_progress_is_visible_while_the_job_runs(stepstone_memory_runner: JobRunner) -> None:
    Waits.gate = asyncio.Event()
    handle = await stepstone_memory_runner.submit(Waits())

    async def reported() -> bool:
        state = await handle.status()
        return state is not None and state.state == "running" and state.progress is not None

    await wait_until(reported, timeout=10)
    state = await handle.status()
    assert state is not None and state.progress == {"done": 3, "of": 10}
    Waits.gate.set()
    assert await handle.result(timeout=10) == "done"
    final = await handle.status()
    assert final is not None and final.state == "succeeded"
    assert final.progress == {"done": 3, "of": 10}


@pytest.fixture
def spans() -> Iterator[Any]:
    pytest.importorskip(
        "opentelemetry.sdk",
        reason="OpenTelemetry spans need the otel extra: pip install -e '.[otel]'",
    )
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use_tracer_provider(provider)
    try:
        yield exporter
    finally:
        use_tracer_provider(None)
        provider.shutdown()


@pytest.mark.stepstone(jobs=[Charge])
async def test_a_span_per_attempt_and_per_step(
    stepstone_memory_runner: JobRunner, spans: Any
) -> None:
    from opentelemetry.trace import StatusCode

    assert await run_job(stepstone_memory_runner, Charge(order="o-9")) == "receipt-o-9"
    finished = spans.get_finished_spans()
    jobs = sorted(
        (s for s in finished if s.name == "stepstone.job obs.charge"),
        key=lambda s: s.attributes["stepstone.job.attempt"],
    )
    assert [s.attributes["stepstone.job.attempt"] for s in jobs] == [1, 2]
    assert jobs[0].status.status_code is StatusCode.ERROR
    assert any(e.name == "exception" for e in jobs[0].events), "the failure was not recorded"
    assert jobs[1].status.status_code is not StatusCode.ERROR
    assert len({s.attributes["stepstone.job.id"] for s in jobs}) == 1

    for job_span, expected in zip(
        jobs,
        [[("lookup", False), ("charge", None)], [("lookup", True), ("charge", False)]],
        strict=True,
    ):
        steps = [
            s
            for s in finished
            if s.name.startswith("stepstone.step ")
            and s.parent is not None
            and s.parent.span_id == job_span.context.span_id
        ]
        steps.sort(key=lambda s: s.start_time)
        got = [
            (s.attributes["stepstone.step.name"], s.attributes.get("stepstone.step.replayed"))
            for s in steps
        ]
        assert got == expected, (job_span.attributes["stepstone.job.attempt"], got)


def test_no_spans_when_no_provider_is_configured() -> None:
    """With opentelemetry installed but no TracerProvider set up, steps pay for
    no spans at all (a no-op span per step is measurable)."""
    trace = pytest.importorskip("opentelemetry.trace", reason="needs the otel extra")
    from stepstone import observability

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        pytest.skip("a global TracerProvider is configured in this process")
    use_tracer_provider(None)
    assert observability._get_tracer() is None
