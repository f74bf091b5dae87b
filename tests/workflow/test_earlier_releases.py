"""Runs stored by earlier releases still read and run: what each release
wrote is kept in the decoders, while nothing writes it any more."""

from __future__ import annotations

from typing import ClassVar

from stepstone import AttemptResult, Job, JobContext, JobRunner
from stepstone.records.attempts import decode
from stepstone.records.codec import canonical_input, pack, unpack
from stepstone.records.envelope import Envelope, input_hash
from stepstone.runtime import FakeClock, MemoryQueue
from stepstone.store import MemoryStore

RUN_ID = "0123456789abcdef"


class Greet(Job[str]):
    NAME: ClassVar[str] = "earlier.greet"
    who: str

    async def run(self, ctx: JobContext) -> str:
        return await ctx.step("greet", lambda: f"hello {self.who}")


def written_by_an_earlier_release(job: Greet) -> bytes:
    """The envelope as releases before the ``kind`` field wrote it: the job
    type's name under ``name`` only."""
    data = canonical_input(job)
    envelope = Envelope(
        kind=job.NAME,
        input=data,
        incarnation="inc-earlier",
        input_hash=input_hash(job.NAME, data),
        keyed=False,
    )
    raw = unpack(envelope.encode())
    raw["name"] = raw.pop("kind")
    return pack(raw)


def test_new_envelopes_carry_the_kind_once() -> None:
    data = canonical_input(Greet(who="a"))
    envelope = Envelope("earlier.greet", data, "inc", input_hash("earlier.greet", data), False)
    raw = unpack(envelope.encode())
    assert raw["kind"] == "earlier.greet"
    assert "name" not in raw


async def test_a_job_queued_by_an_earlier_release_runs() -> None:
    clock = FakeClock()
    queue = MemoryQueue(clock=clock)
    payload = written_by_an_earlier_release(Greet(who="old"))
    assert Envelope.decode(payload).kind == Greet.NAME
    await queue.enqueue(payload, kind=Greet.NAME, id=RUN_ID)
    async with JobRunner(MemoryStore(clock=clock.now), queue=queue, clock=clock, jobs=[Greet]) as r:
        assert await r.handle(RUN_ID, Greet).result(timeout=10) == "hello old"


async def test_an_outcome_recorded_by_an_earlier_release_reads() -> None:
    """An outcome record with the job type's name under ``name`` only, as
    releases before the ``kind`` field wrote it: its run reads as it did."""
    clock = FakeClock()
    store = MemoryStore(clock=clock.now)
    async with JobRunner(store, clock=clock, jobs=[Greet]) as runner:
        handle = await runner.submit(Greet(who="then"))
        assert await handle.result(timeout=10) == "hello then"
        key = runner.layout.outcome(handle.id)
        raw = unpack((await store.get(key)).data)
        raw["name"] = raw.pop("kind")
        await store.put(key, pack(raw))
    async with JobRunner(store, clock=clock, jobs=[Greet]) as runner:
        outcome = await runner.handle(handle.id, Greet).poll()
        assert outcome is not None and outcome.kind == Greet.NAME
        assert outcome.unwrap() == "hello then"


def attempt_record_as_written_before(claim: int, result: str) -> bytes:
    """An attempt record as the release before this one wrote it, field by field."""
    return pack(
        {
            "v": 1,
            "claim": claim,
            "attempt": 1,
            "result": result,
            "claimed_at": 1_700_000_000.0,
            "ended_at": 1_700_000_001.5,
            "worker": ["host-a", 4242, "worker-0a1b"],
            "error_type": "ConnectionError" if result == "failed" else None,
            "message": "ConnectionError: reset" if result == "failed" else None,
            "traceback": None,
        }
    )


async def test_attempt_records_written_before_read_as_their_results() -> None:
    """Every result an earlier release recorded reads as the same
    AttemptResult, through a run's history."""
    clock = FakeClock()
    store = MemoryStore(clock=clock.now)
    earlier = [r for r in AttemptResult if r is not AttemptResult.UNRECORDED]
    async with JobRunner(store, clock=clock, jobs=[Greet]) as runner:
        handle = await runner.submit(Greet(who="history"))
        assert await handle.result(timeout=10) == "hello history"
        outcome = await runner.handle(handle.id, Greet).poll()
        assert outcome is not None
        incarnation = unpack((await store.get(runner.layout.outcome(handle.id))).data)[
            "incarnation"
        ]
        for claim, result in enumerate(earlier, start=1):
            data = attempt_record_as_written_before(claim, result.value)
            assert decode(data).result is result
            await store.put(runner.layout.attempt(handle.id, incarnation, claim), data)
        history = await runner.history(handle.id)
    results = [info.result for info in history]
    assert results[: len(earlier)] == earlier
    failed = history[earlier.index(AttemptResult.FAILED)]
    assert (failed.worker, failed.host, failed.pid) == ("worker-0a1b", "host-a", 4242)
    assert failed.message == "ConnectionError: reset" and failed.seconds == 1.5
