"""Well-formed records holding hostile values, under live runs.

The garbage-bytes proof (test_corrupt_records.py) spoils a record's bytes;
here each record decodes, and one field holds what no run could write: NaN,
infinities, 1e20, negative and huge integers, a list of 100,000 items, a
value of another type (:mod:`rel_hostile`). The sweep is every field of
every kind of record a run has (its queue record and the payload in it, its
outcome, a memo and the value in it, its progress, an attempt record, its
concurrency key's slot table, its rate limit's state, an event it takes) x
every hostile value, one run per case, all of a kind in one worker; the
fields come from the records as the engine wrote them, so a new field is
swept without a change here. Schedule markers are swept in
tests/workflow/test_schedules.py's way, below.

For every case: the run ends in bounded time (an outcome, or an error
naming its own object); the queue lets go of it; a canary after all of them
succeeds; ``ls``, ``stats`` and ``show`` of every run answer with exit 0 and
warnings only, bulk ``retry`` and ``cancel`` in one line each (exit 0 or
3, never a traceback); the web view's list and every run page answer 200
(or a one-line 4xx), never a 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from rel_hostile import HOSTILE, Case, cases, spoiled
from rel_spoiling import Canary, all_settled, end_of, until

from stepstone import (
    CorruptRecord,
    Job,
    JobContext,
    JobHandle,
    JobRunner,
    JobStatus,
    Outcome,
    RateLimit,
    Schedule,
    StepstoneError,
)
from stepstone.cli import main
from stepstone.limits import rate, slots
from stepstone.limits.shared import FORMAT as LIMIT_FORMAT
from stepstone.records.attempts import AttemptInfo, AttemptResult
from stepstone.records.attempts import decode as attempt_decode
from stepstone.records.attempts import encode as attempt_encode
from stepstone.records.calls import Call, PositionedMemo
from stepstone.records.codec import codec_for_type, pack, unpack
from stepstone.records.envelope import Envelope
from stepstone.records.layout import Layout, event_seq, limit_digest, position_key
from stepstone.records.outcome import OutcomeRecord, decode_outcome_key
from stepstone.records.schedule_marker import Marker, tick_run_id
from stepstone.runtime.capabilities import Waking
from stepstone.runtime.errors import MalformedPayload
from stepstone.runtime.store_queue.records import StoredJob
from stepstone.runtime.store_queue.records import decode as queue_decode
from stepstone.runtime.store_queue.records import encode as queue_encode
from stepstone.store import FileStore, MemoryStore, NotFound
from stepstone.testing import FakeClock

pytestmark = pytest.mark.slow

DEADLINE = 60.0
"""Seconds every run of a sweep gets to end after its record was spoiled."""
PAGE_DEADLINE = 30.0
"""Seconds a command or a page gets to answer."""


class Victim(Job[int]):
    """Records a step and its progress, fails its first attempt (the retry
    waits on the clock: its records are spoiled meanwhile), then ends."""

    NAME: ClassVar[str] = "hostile.victim"
    n: int

    async def run(self, ctx: JobContext) -> int:
        return await _victim_run(self.n, ctx)


class SlotVictim(Job[int]):
    NAME: ClassVar[str] = "hostile.slot"
    n: int

    def concurrency_key(self) -> str:
        return f"key-{self.n}"

    async def run(self, ctx: JobContext) -> int:
        return await _victim_run(self.n, ctx)


class RateVictim(Job[int]):
    NAME: ClassVar[str] = "hostile.rate"
    rate_limit: ClassVar[RateLimit | None] = RateLimit(1, per=timedelta(seconds=1))
    n: int

    def rate_limit_key(self) -> str:
        return f"rate-{self.n}"

    async def run(self, ctx: JobContext) -> int:
        return await _victim_run(self.n, ctx)


class Go(BaseModel):
    amount: int
    note: str


class EventVictim(Job[int]):
    """Waits for its event ``go``: a hostile one is written in its place."""

    NAME: ClassVar[str] = "hostile.event"
    n: int

    async def run(self, ctx: JobContext) -> int:
        go = await ctx.wait_for_event("go", type=Go)
        return -1 if go is None else go.amount


async def _victim_run(n: int, ctx: JobContext) -> int:
    async def one() -> int:
        return n

    first = await ctx.step("one", one)
    ctx.progress({"n": n, "attempt": ctx.attempt})
    if ctx.attempt == 1:
        raise RuntimeError("the first attempt fails; the retry waits on the clock")

    async def two() -> int:
        return first + 1

    return await ctx.step("two", two)


JOBS = [Victim, SlotVictim, RateVictim, EventVictim, Canary]
KINDS = ("queue", "outcome", "memo", "progress", "attempt", "slot", "rate", "event")
VICTIM_OF = {"slot": SlotVictim, "rate": RateVictim, "event": EventVictim}


class Sweep:
    """One kind's sweep: the runner that works, the one that submits and
    looks (an application's, as another process has), and the victims."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.clock = FakeClock()
        self.store = MemoryStore(clock=self.clock.now)
        self.worker = JobRunner(
            self.store,
            jobs=JOBS,
            clock=self.clock,
            concurrency=32,
            retry_backoff=60.0,
            retry_jitter=0.0,
            lease=600.0,
            poll_interval=0.05,
            drain_timeout=1.0,
        )
        self.api = JobRunner(self.store, clock=self.clock)  # (its own queue: another process)
        self.job_type: type[Job[int]] = VICTIM_OF.get(kind, Victim)

    async def record(self, handle: JobHandle[int]) -> tuple[str, bytes, list[str]]:
        """The key of the victim's record of this sweep's kind, its bytes as
        the engine writes them, and the fields its record class declares."""
        api, kind = self.api, self.kind
        queued = await api.queue.get(handle.id)
        assert queued is not None
        envelope = Envelope.decode(queued.payload)
        inc = envelope.incarnation
        now = self.clock.now()
        if kind == "queue":
            key = f"queue/jobs/{handle.id}"
            return key, (await api.store.get(key)).data, [f.name for f in fields(StoredJob)]
        if kind == "outcome":
            record = OutcomeRecord(
                run_id=handle.id,
                kind=self.job_type.NAME,
                status=JobStatus.SUCCEEDED,
                input_hash=envelope.input_hash,
                incarnation=inc,
                attempts=2,
                finished_at=now,
                result=pack(1),
                submitted_at=now,
                started_at=now,
                claims=2,
                claimed_at=now,
                worker=("host", 1, "host"),
            )
            declared = [f.name for f in fields(OutcomeRecord)]
            return api.layout.outcome(handle.id), record.encode(), declared
        if kind == "memo":
            key = api.layout.memo(handle.id, inc, position_key(1))  # (its step "one")
            return key, (await api.store.get(key)).data, []
        if kind == "progress":
            key = api.layout.progress(handle.id, inc)
            return key, (await api.store.get(key)).data, []
        if kind == "attempt":  # (written just after the retry is: wait for it)
            key = api.layout.attempt(handle.id, inc, 1)
            await until(lambda: exists(api, key), f"the attempt record {key}", DEADLINE)
            return key, (await api.store.get(key)).data, [f.name for f in fields(AttemptInfo)]
        if kind == "slot":
            job = self.job_type(n=0)
            name = self.job_type.NAME
            key = api.layout.slots(limit_digest(name, job.concurrency_key()))
            table = slots.SlotTable(
                name,
                "key-0",
                1,
                holders=(slots.Holder("f" * 32, "tok", now + 30),),
                waiters=(slots.Waiter(handle.id, None),),
            )
            return key, _limit_record(slots.to_fields(table)), []
        if kind == "rate":
            name = self.job_type.NAME
            key = api.layout.rate(limit_digest(name, "rate-0"))
            return key, _limit_record(rate.to_fields(rate.RateState(name, "rate-0", now))), []
        assert kind == "event"
        key = api.layout.event(handle.id, inc, "go", event_seq(now))
        return key, codec_for_type(Go).encode(Go(amount=7, note="go")), []

    def key_of(self, key: str, handle: JobHandle[int], n: int) -> str:
        """The template record's key, for victim ``n`` (slot and rate keys
        are per victim)."""
        if self.kind == "slot":
            return self.api.layout.slots(limit_digest(self.job_type.NAME, f"key-{n}"))
        if self.kind == "rate":
            return self.api.layout.rate(limit_digest(self.job_type.NAME, f"rate-{n}"))
        return key


def _limit_record(state: Any) -> bytes:
    return pack({"v": LIMIT_FORMAT, "rev": 1, "nonce": "0123abcd", "state": state})


def sweep_cases(kind: str) -> list[Case]:
    """The cases of ``kind``, from a record of it as the engine writes it."""
    return asyncio.run(_sweep_cases(kind))


async def _sweep_cases(kind: str) -> list[Case]:
    sweep = Sweep(kind)
    async with sweep.worker:
        [handle] = await submit_and_prepare(sweep, 1)
        _, record, declared = await sweep.record(handle)
    await sweep.api.close()
    return cases(kind, record, declared)


async def submit_and_prepare(sweep: Sweep, count: int) -> list[JobHandle[int]]:
    """``count`` victims, each where its record is spoiled: waiting for its
    retry (an event victim: for its event)."""
    handles = [await sweep.api.submit(sweep.job_type(n=n)) for n in range(count)]
    wanted = JobStatus.WAITING_FOR_EVENT if sweep.kind == "event" else JobStatus.SCHEDULED

    async def ready() -> bool:
        records = [await sweep.api.queue.get(h.id) for h in handles]
        return all(r is not None and r.status is wanted for r in records)

    await until(ready, "every victim to wait where its record is spoiled", DEADLINE)
    return handles


@pytest.mark.parametrize("kind", KINDS)
def test_hostile_values_in_every_field_end_their_runs_and_every_surface_answers(
    kind: str,
) -> None:
    with tempfile.TemporaryDirectory() as root:
        asyncio.run(scenario(root, kind))


async def scenario(root: str, kind: str) -> None:
    """The runs on a MemoryStore (one store object, each runner its own
    queue, as two processes have), then their records copied into ``root``
    for the CLI and the web view to read as an operator would."""
    sweep = Sweep(kind)
    plan = await _sweep_cases(kind)
    assert plan, f"no fields found in a {kind} record"
    api, clock = sweep.api, sweep.clock
    async with sweep.worker:
        victims = await submit_and_prepare(sweep, len(plan))
        keys: list[str] = []
        for n, (case, handle) in enumerate(zip(plan, victims, strict=True)):
            key, record, _ = await sweep.record(handle)
            keys.append(sweep.key_of(key, handle, n))
            await api.store.put(keys[-1], spoiled(record, case))
            if kind == "event":
                assert isinstance(api.queue, Waking)
                await api.queue.wake(handle.id, JobStatus.WAITING_FOR_EVENT)

        # Awaited through the worker's runner, which hears of each outcome
        # its worker records (an application's runner polls, more slowly).
        awaited = [sweep.worker.handle(h.id, sweep.job_type) for h in victims]
        ends = await pumped(clock, asyncio.gather(*(end_of(h) for h in awaited)))
        wrong = [
            f"{case.id}: {said[:300]!r}"
            for case, key, end in zip(plan, keys, ends, strict=True)
            if (said := failure(end)) is not None and not names_its_object(case, key, said)
        ]
        assert not wrong, "runs that failed without naming what was wrong:\n" + "\n".join(wrong)
        await pumped(
            clock, until(lambda: all_settled(api, victims), "the queue to let go", DEADLINE)
        )

        canary = await sweep.worker.submit(Canary(n=5))
        assert await pumped(clock, canary.result(timeout=DEADLINE)) == 10
    await api.close()
    await copied(sweep.store, FileStore(root))

    ids = {h.id: case.id for h, case in zip(victims, plan, strict=True)}
    wrong = await pages_answer(sweep.store, ids)
    wrong += await commands_answer(root, ids, sweep.job_type.NAME)
    assert not wrong, "\n".join(wrong)


async def copied(source: MemoryStore, target: FileStore) -> None:
    """Every object of ``source`` written into ``target``, side by side (the
    FileStore makes each batch durable together)."""
    objects = [info.key async for info in source.scan("")]

    async def one(key: str) -> None:
        await target.put(key, (await source.get(key)).data)

    await asyncio.gather(*(one(key) for key in objects))
    await target.close()


async def pumped(clock: FakeClock, work: Awaitable[Any]) -> Any:
    """``work``, the clock moving on two minutes every 20 ms meanwhile (past
    retries' backoffs, rate turns, lapsed slots), within ``DEADLINE``."""

    async def pump() -> None:
        while True:
            await asyncio.sleep(0.02)
            clock.advance(120)

    pumping = asyncio.create_task(pump())
    try:
        return await asyncio.wait_for(work, DEADLINE)
    finally:
        pumping.cancel()


async def exists(api: JobRunner, key: str) -> bool:
    try:
        await api.store.head(key)
    except NotFound:
        return False
    return True


def failure(end: Outcome[int] | StepstoneError) -> str | None:
    """What a run that did not succeed says about why; None if it succeeded."""
    if isinstance(end, StepstoneError):
        return str(end)
    return None if end.ok else str(end.error.message if end.error else end.status)


def names_its_object(case: Case, key: str, said: str) -> bool:
    """Whether a failure names the spoiled record: its key, or for a queue
    record's payload (the run's own input), the payload and its field."""
    if key in said:
        return True
    payload = case.kind == "queue" and case.path[0] == "payload"
    return payload and ("payload" in said or "input" in said)


async def commands_answer(root: str, ids: dict[str, str], kind: str) -> list[str]:
    """Every command answers: the listings and ``show`` of each run with exit
    0 and warnings only; the bulk actions done or partial, in one line. What
    did not, one line per command."""
    wrong: list[str] = []
    store = ["--store", root]
    for command in (["ls"], ["ls", "--json"], ["stats"], *(["show", i] for i in ids)):
        status, out, err = await answered(command + store)
        case = ids.get(command[-1], " ".join(command))
        warned = all(line.startswith("stepstone: warning: ") for line in err.splitlines())
        if status != 0 or not warned or "Traceback" in err:
            wrong.append(f"{case}: {command[0]} exit {status}: {err[:300]!r}")
        elif "--json" in command:
            json.loads(out)
    bulk = (["retry", "--status", "dead", "--yes"], ["cancel", "--kind", kind, "--yes"])
    for command in bulk:
        status, out, err = await answered(command + store)
        failed = [line for line in err.splitlines() if line.startswith("stepstone: error:")]
        lines = all(line.startswith("stepstone: ") for line in err.splitlines())
        if not (status in (0, 3) or (status == 1 and len(failed) == 1)) or not lines:
            wrong.append(f"{command[0]}: exit {status}: {err[:300]!r}")
    return wrong


async def answered(argv: list[str]) -> tuple[int, str, str]:
    """A command's status, stdout and stderr, within ``PAGE_DEADLINE``."""

    def run() -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(argv)
        return status, out.getvalue(), err.getvalue()

    return await asyncio.wait_for(asyncio.to_thread(run), PAGE_DEADLINE)


async def pages_answer(store: MemoryStore, ids: dict[str, str]) -> list[str]:
    """The web view's list, and every run's page: 200, or a 4xx of one line.
    What did not, one line per page."""
    pytest.importorskip("starlette", reason="the web view needs the ui extra")
    import httpx

    from stepstone.ui.app import create_app

    wrong: list[str] = []
    runner = JobRunner(store)
    try:
        app = create_app(runner, refresh=0, hosts=["localhost"])
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            for path in ["/", "/?status=dead", *(f"/runs/{i}" for i in ids)]:
                page = await asyncio.wait_for(client.get(path), PAGE_DEADLINE)
                case = ids.get(path.rsplit("/", 1)[-1], path)
                if page.status_code == 200:
                    continue
                one_line = len(page.text.strip().splitlines()) == 1
                if not (400 <= page.status_code < 500 and one_line):
                    wrong.append(f"{case}: page {page.status_code}: {page.text[:300]!r}")
    finally:
        await runner.close()
    return wrong


def test_the_sweep_covers_every_field_of_every_kind() -> None:
    """Cases come from the records themselves: the queue record's own fields
    and its payload's, and the hostile values are every one."""
    plan = sweep_cases("queue")
    paths = {case.path for case in plan}
    assert {("run_at",), ("lease_expires_at",), ("claims",), ("attempts",)} <= paths
    assert ("payload", "<msgpack>", "inc") in paths
    assert {case.value for case in plan} == set(HOSTILE)


class Beat(Job[int]):
    NAME: ClassVar[str] = "hostile.beat"
    at: str

    async def run(self, ctx: JobContext) -> int:
        return 1


async def test_hostile_values_in_a_schedule_marker_are_repaired_and_the_schedule_fires() -> None:
    """Every field of a schedule's marker (as the scheduler writes it) x
    every hostile value, one schedule each: each marker is set to a time
    that could be real (with a warning naming it) or kept, and every
    schedule submits its next tick."""
    start = datetime(2026, 3, 2, 12, 0, tzinfo=UTC).timestamp()  # on a 5-minute tick
    plan = cases("marker", schedule_marker(start))
    schedules = [
        Schedule(f"s{n}", every=timedelta(minutes=5), job=lambda tick: Beat(at=tick.isoformat()))
        for n in range(len(plan))
    ]
    clock = FakeClock(start + 10)
    store = MemoryStore(clock=clock.now)
    layout = Layout("")
    for case, schedule in zip(plan, schedules, strict=True):
        await store.put(layout.schedule(schedule.name), spoiled(schedule_marker(start), case))
    runner = JobRunner(store, jobs=[Beat], schedules=schedules, clock=clock, poll_interval=0.05)
    async with runner:

        async def every_marker_real() -> bool:
            ticks = [await runner.scheduler.last_tick(s) for s in schedules]
            return all(isinstance(tick, float) and tick <= clock.now() for tick in ticks)

        await until(every_marker_real, "every marker to be repaired", DEADLINE)
        clock.advance(300)
        next_tick = datetime.fromtimestamp(start + 300, UTC)

        async def every_schedule_fired() -> bool:
            for schedule in schedules:
                try:
                    await store.head(layout.outcome(schedule.run_id(next_tick)))
                except NotFound:
                    return False
            return True

        await until(every_schedule_fired, "every schedule's next tick", DEADLINE)


def schedule_marker(tick: float) -> bytes:
    """A schedule's marker as the scheduler writes it, every field set."""
    return Marker(
        tick=tick,
        name="s0",
        spec="every 0:05:00",
        missed="latest",
        next_tick=tick + 300,
        run=tick_run_id("s0", tick),
        overlap="buffer_one",
        latest=tick_run_id("s0", tick),
        latest_tick=tick,
        cancel=tick_run_id("s0", tick - 300),
        buffered=(tick,),
        skipped_tick=tick - 300,
        skipped_why="overlap skip: the run started last was still live",
        paused_at=tick - 600,
        paused_by="ana@ops",
        note="the warehouse counts stock",
        resumed_at=tick - 450,
    ).encode()


# -- the decoders, several fields at once ------------------------------------------


def _decoders() -> dict[str, tuple[bytes, Callable[[bytes], object], tuple[type, ...]]]:
    """Each kind's record as the engine writes it, its decoder, and the
    errors it may raise (each naming the record or saying what is wrong)."""
    now = 1.8e9
    queued = StoredJob(
        id="r1",
        kind="k",
        payload=Envelope("k", b'{"n":1}', "inc1", "ih1", keyed=False).encode(),
        priority=5,
        max_attempts=3,
        run_at=now,
        created_at=now,
        updated_at=now,
        nonce="n",
        token="t",
        lease_expires_at=now + 30,
    )
    outcome = OutcomeRecord(
        "r1", "k", JobStatus.SUCCEEDED, "ih1", "inc1", 1, now, result=pack(1), claims=1
    )
    attempt = AttemptInfo(1, 1, AttemptResult.FAILED, claimed_at=now, ended_at=now + 1)
    table = slots.SlotTable(
        "k", "key", 2, (slots.Holder("r1", "t", now + 30),), (slots.Waiter("r2"),)
    )
    memo = PositionedMemo(1, Call("step", "one"), pack(1)).encode()

    def queue(data: bytes) -> object:
        return queue_decode(data, key="queue/jobs/r1")

    def shared_slot(data: bytes) -> object:
        return slots.from_fields(unpack(data), "slots/x")

    def shared_rate(data: bytes) -> object:
        return rate.from_fields(unpack(data), "rates/x")

    return {
        "queue": (queue_encode(queued), queue, (CorruptRecord,)),
        "envelope": (queued.payload, Envelope.decode, (MalformedPayload,)),
        "outcome": (outcome.encode(), decode_outcome_key, (ValueError,)),
        "attempt": (attempt_encode(attempt), attempt_decode, (ValueError,)),
        "memo": (memo, PositionedMemo.decode, (ValueError,)),
        "slot": (pack(slots.to_fields(table)), shared_slot, (CorruptRecord,)),
        "rate": (
            pack(rate.to_fields(rate.RateState("k", None, now))),
            shared_rate,
            (CorruptRecord,),
        ),
    }


DECODERS = _decoders()


@settings(max_examples=60, deadline=None)
@given(data=st.data(), kind=st.sampled_from(sorted(DECODERS)))
def test_a_decoder_refuses_hostile_values_in_any_fields_at_once_in_its_own_terms(
    data: st.DataObject, kind: str
) -> None:
    """Several fields spoiled together (the sweep above spoils one at a
    time): the decoder answers a record, or raises its own error, never
    another (an OverflowError, a TypeError from deep inside)."""
    record, decode, errors = DECODERS[kind]
    every = cases(kind, record)
    chosen = data.draw(st.lists(st.sampled_from(every), min_size=2, max_size=5, unique=True))
    spoilt = record
    for case in chosen:
        with contextlib.suppress(KeyError, IndexError, TypeError):  # (a field spoiled away)
            spoilt = spoiled(spoilt, case)
    with contextlib.suppress(*errors):
        decode(spoilt)
