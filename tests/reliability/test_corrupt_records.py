"""Corrupt records under live jobs, drawn by hypothesis: arbitrary bytes,
truncated records and records of another format version, written over each
kind of object a run has (its queue record, a memo, its outcome, its
progress) while the run waits for a retry or while it runs. Whatever is
written, every job ends in bounded time (its handle returns an outcome or
raises a StepstoneError naming its own object), the worker and the CLI stay
up, and no other job is affected.

One worker runner and one API runner (its own StoreQueue, as another process
has) over one directory; the API submits and waits, as an application would.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import tempfile
from dataclasses import dataclass
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rel_spoiling import Canary, all_settled, end_of, until

from stepstone import (
    Job,
    JobContext,
    JobHandle,
    JobRunner,
    JobStatus,
    StepstoneError,
)
from stepstone.cli import main
from stepstone.records.codec import pack, unpack
from stepstone.records.envelope import Envelope
from stepstone.records.layout import position_key
from stepstone.records.outcome import OutcomeRecord
from stepstone.testing import FakeClock

pytestmark = pytest.mark.slow

DEADLINE = 30.0
"""Seconds a job gets to end after its object was spoiled: bounded, and generous."""
KINDS = ("queue", "memo", "outcome", "progress")
MOMENTS = ("queued", "running")


class Gates:
    """Where the victims wait in their second attempt, so the test can spoil
    their objects while they run."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.release = asyncio.Event()


class Victim(Job[int]):
    """Records a step and its progress, fails its first attempt (the retry
    waits on the clock), then on the second waits at the gate before its last step."""

    NAME: ClassVar[str] = "prop.victim"
    n: int

    async def run(self, ctx: JobContext) -> int:
        gates = ctx.state(Gates)

        async def one() -> int:
            return self.n

        first = await ctx.step("one", one)
        ctx.progress({"n": self.n, "attempt": ctx.attempt})
        if ctx.attempt == 1:
            raise RuntimeError("the first attempt fails; the retry waits on the clock")
        gates.running.add(ctx.run_id)
        await gates.release.wait()

        async def two() -> int:
            return first + 1

        return await ctx.step("two", two)


@dataclass(frozen=True)
class Spoil:
    """What to write over which object of a victim, and when."""

    kind: str
    moment: str
    how: str
    """``bytes`` (``data`` as it is), ``truncated`` (the object's bytes cut at
    ``cut`` of their length) or ``other-version`` (the record as another
    format version, or a value of another shape where there is no version)."""
    data: bytes = b""
    cut: float = 0.5


spoils = st.builds(
    Spoil,
    kind=st.sampled_from(KINDS),
    moment=st.sampled_from(MOMENTS),
    how=st.sampled_from(("bytes", "truncated", "other-version")),
    data=st.binary(max_size=48),
    cut=st.floats(min_value=0.0, max_value=0.99),
)


def every_kind_and_moment(how: str) -> list[Spoil]:
    return [Spoil(kind, moment, how, b"\xc1garbage") for kind in KINDS for moment in MOMENTS]


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(plan=st.lists(spoils, min_size=1, max_size=4))
@example(plan=every_kind_and_moment("bytes"))
@example(plan=every_kind_and_moment("truncated"))
@example(plan=every_kind_and_moment("other-version"))
def test_spoiled_records_under_live_jobs_end_those_jobs_and_nothing_else(
    plan: list[Spoil],
) -> None:
    with tempfile.TemporaryDirectory() as root:
        asyncio.run(scenario(root, plan))


async def scenario(root: str, plan: list[Spoil]) -> None:
    clock = FakeClock()
    gates = Gates()
    worker = JobRunner(
        root,
        jobs=[Victim, Canary],
        state=[gates],
        clock=clock,
        retry_backoff=60.0,
        retry_jitter=0.0,
        lease=600.0,
        poll_interval=0.05,
        drain_timeout=1.0,
    )
    api = JobRunner(root, clock=clock)
    async with worker:
        victims = [await api.submit(Victim(n=i)) for i in range(len(plan))]
        canary = await api.submit(Canary(n=21))
        assert await canary.result(timeout=DEADLINE) == 42

        await until(
            lambda: all_scheduled(api, victims), "every victim waits for its retry", DEADLINE
        )
        for spoil, handle in zip(plan, victims, strict=True):
            if spoil.moment == "queued":
                await spoil_object(api, handle.id, spoil)
        clock.advance(61)
        running = [h.id for s, h in zip(plan, victims, strict=True) if s.moment == "running"]
        await until(
            lambda: set(running) <= gates.running, "the victims to spoil reach the gate", DEADLINE
        )
        for spoil, handle in zip(plan, victims, strict=True):
            if spoil.moment == "running":
                await spoil_object(api, handle.id, spoil)
        gates.release.set()

        ends = await asyncio.wait_for(
            asyncio.gather(*(end_of(h) for h in victims)), DEADLINE
        )  # every job ends, in bounded time
        for handle, end in zip(victims, ends, strict=True):
            if isinstance(end, StepstoneError):
                assert handle.id in getattr(end, "key", handle.id), (handle.id, end)
        # ... and the queue lets go of each: none is claimed again and again.
        await until(
            lambda: all_settled(api, victims), "every victim to leave the live queue", DEADLINE
        )

        after = await api.submit(Canary(n=5))
        assert await after.result(timeout=DEADLINE) == 10, "the worker did not stay up"

    await cli_stays_up(root, [h.id for h in victims])


async def all_scheduled(api: JobRunner, victims: list[JobHandle[int]]) -> bool:
    records = [await api.queue.get(h.id) for h in victims]
    return all(r is not None and r.status is JobStatus.SCHEDULED for r in records)


async def spoil_object(api: JobRunner, run_id: str, spoil: Spoil) -> None:
    queued = await api.queue.get(run_id)
    assert queued is not None
    incarnation = Envelope.decode(queued.payload).incarnation
    key = {
        "queue": f"queue/jobs/{run_id}",
        "memo": api.layout.memo(run_id, incarnation, position_key(1)),  # (step "one")
        "outcome": api.layout.outcome(run_id),
        "progress": api.layout.progress(run_id, incarnation),
    }[spoil.kind]
    if spoil.kind == "outcome":  # (none yet: spoil a record of this very run)
        current = outcome_of(run_id, incarnation, Envelope.decode(queued.payload).input_hash)
    else:
        current = (await api.store.get(key)).data
    await api.store.put(key, spoiled(current, spoil))


def outcome_of(run_id: str, incarnation: str, input_hash: str) -> bytes:
    return OutcomeRecord(
        run_id=run_id,
        kind=Victim.NAME,
        status=JobStatus.SUCCEEDED,
        input_hash=input_hash,
        incarnation=incarnation,
        attempts=2,
        finished_at=0.0,
        result=pack(1),
    ).encode()


def spoiled(current: bytes, spoil: Spoil) -> bytes:
    if spoil.how == "bytes":
        return spoil.data
    if spoil.how == "truncated":
        return current[: int(len(current) * spoil.cut)]
    value = unpack(current)
    if isinstance(value, dict) and ("v" in value or "format" in value):
        version = "v" if "v" in value else "format"
        return pack({**value, version: 2})
    return pack({"v": 2, "value": value})  # a memo or progress: a value of another shape


async def cli_stays_up(root: str, ids: list[str]) -> None:
    """Every command answers however many of the records are spoiled: the
    listings and ``show`` with exit 0; ``retry`` and ``cancel`` done, or
    refused (a job that is not dead, one that has finished) in one line."""
    commands = [["ls"], ["ls", "--json"], ["stats"], *(["show", i] for i in ids)]
    for command in commands:
        status, out, err = await asyncio.to_thread(run_cli, [*command, "--store", root])
        assert status == 0, (command, out, err)
        assert "Traceback" not in err, (command, err)
        if "--json" in command:
            json.loads(out)
    for command in (*(["retry", i] for i in ids), *(["cancel", i] for i in ids)):
        status, out, err = await asyncio.to_thread(run_cli, [*command, "--store", root])
        assert "Traceback" not in err, (command, err)
        refused = [line for line in err.splitlines() if line.startswith("stepstone: error:")]
        assert status == 0 or (status == 1 and len(refused) == 1), (command, status, out, err)


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()
