"""Bad input: each kind is refused with its documented error, or dead-lettered
with its reason, while one worker process keeps running through all of them
and an ordinary job submitted after each one still completes."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from rel_jobs import (
    BadResult,
    Blob,
    ClassifiesUnprintable,
    DotSteps,
    Normal,
    RaisesUnprintable,
    read_events,
)
from rel_support import Workers, stats_of, submitter, wait_for

from stepstone import EncodingError, Job, JobContext, JobFailed, JobRunner, JobStatus
from stepstone.records.envelope import Envelope, input_hash
from stepstone.runtime.errors import PayloadTooLarge
from stepstone.runtime.queue import JobRecord
from stepstone.runtime.store_queue.records import CorruptRecord, StoredJob, encode
from stepstone.store import FileStore, InvalidKey

pytestmark = pytest.mark.slow


class Stranger(Job[int]):
    """A job type no worker registers."""

    NAME: ClassVar[str] = "rel.stranger"

    async def run(self, ctx: JobContext) -> int:
        return 0


def names_in(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


class Env:
    def __init__(self, root: Path, pool: Workers, runner: JobRunner) -> None:
        self.root = root
        self.pool = pool
        self.runner = runner
        self.canaries = 0

    async def still_works(self) -> None:
        """The worker is alive and an ordinary job still completes."""
        self.canaries += 1
        n = self.canaries
        assert await (await self.runner.submit(Normal(n=n))).result(timeout=20) == 2 * n + 1
        assert all(p.poll() is None for p in self.pool.procs), "the worker died"

    def queued(self) -> int:
        jobs = self.root / "queue" / "jobs"
        return len(list(jobs.iterdir())) if jobs.is_dir() else 0


async def dead_lettered(env: Env, run: str) -> JobRecord:
    """The run's queue record once it is dead (the outcome is written first,
    then the record is dead-lettered: wait for the second)."""

    async def dead() -> bool:
        record = await env.runner.queue.get(run)
        return record is not None and record.status is JobStatus.DEAD

    await wait_for(dead, 10, f"run {run} to be dead-lettered")
    record = await env.runner.queue.get(run)
    assert record is not None
    return record


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    root = tmp_path / "store"
    pool = Workers(root, tmp_path / "events.log", tmp_path / "logs", REL_LEASE="5")
    runner = submitter(root)
    try:
        await pool.ready(pool.start())
        yield Env(root, pool, runner)
        assert await pool.stop(pool.procs[0]) == 0, "the worker did not exit cleanly"
    finally:
        pool.kill_all()
        await runner.store.close()


async def test_an_unknown_job_type_is_dead_with_its_reason(env: Env) -> None:
    handle = await env.runner.submit(Stranger())
    outcome = await handle.join(timeout=20)
    assert outcome.status is JobStatus.FAILED and outcome.error is not None
    assert outcome.error.reason == "unknown"
    assert "no handler registered for job type `rel.stranger`" in outcome.error.message
    record = await dead_lettered(env, handle.id)
    assert record.dead_reason is not None and "rel.stranger" in record.dead_reason
    await env.still_works()


async def test_garbage_queue_records_are_skipped_and_named(env: Env, tmp_path: Path) -> None:
    store = FileStore(env.root)
    valid = StoredJob(
        id="truncated",
        kind=Normal.NAME,
        payload=b"whatever",
        priority=5,
        max_attempts=3,
        run_at=0.0,
        created_at=0.0,
        updated_at=0.0,
        nonce="n",
    )
    planted = {
        "queue/jobs/garbage": b"\x00\xff\xfe not msgpack at all",
        "queue/jobs/truncated": encode(valid)[:20],
        "queue/jobs/empty": b"",
        "queue/jobs/wrong-shape": b"\x93\x01\x02\x03",  # a msgpack list, not a record
    }
    for key, data in planted.items():
        await store.put(key, data)
    await store.close()
    await env.still_works()  # the worker listed past them and kept claiming
    # Reading one names it: CorruptRecord with the key, not a crash.
    with pytest.raises(CorruptRecord, match="queue/jobs/garbage"):
        await env.runner.queue.get("garbage")
    assert env.pool.procs[0].poll() is None
    assert await env.pool.stop(env.pool.procs[0]) == 0
    events = read_events(str(tmp_path / "events.log"))
    warned = " ".join(" ".join(e) for e in events if e[0] == "WARN")
    for key in planted:
        assert key in warned, f"no warning named {key}"
    stats = stats_of(events, env.pool.procs[0].pid)
    assert stats is not None and stats["corrupt_records"] == len(planted), stats
    env.pool.start()  # for the fixture's clean stop


async def test_malformed_payloads_in_valid_records_are_dead_as_malformed(env: Env) -> None:
    good = Envelope(Normal.NAME, b'{"n":1}', "inc0", input_hash(Normal.NAME, b'{"n":1}'), False)
    payloads = {
        "garbage": (b"\xc1\xc1\xc1 garbage", "could not be decoded"),
        "truncated": (good.encode()[:-7], "could not be decoded"),
        "not-an-envelope": (b"\x81\xa1v\x63", "could not be decoded"),
        "input does not validate": (
            Envelope(Normal.NAME, b'{"n":"x"}', "inc1", "h", False).encode(),
            "does not validate as Normal",
        ),
        "input is not json": (
            Envelope(Normal.NAME, b"{\xff", "inc2", "h", False).encode(),
            "does not validate as Normal",
        ),
    }
    for what, (payload, reason) in payloads.items():
        run = secrets.token_hex(16)
        await env.runner.queue.enqueue(payload, kind=Normal.NAME, id=run)
        outcome = await env.runner.handle(run, Normal).join(timeout=20)
        assert outcome.status is JobStatus.FAILED and outcome.error is not None, what
        assert outcome.error.reason == "malformed", (what, outcome.error)
        assert reason in outcome.error.message, (what, outcome.error.message)
        await dead_lettered(env, run)
        await env.still_works()


async def test_a_payload_over_the_limit_is_refused_at_submit(env: Env) -> None:
    before = env.queued()
    with pytest.raises(PayloadTooLarge, match="over the queue's limit"):
        await env.runner.submit(Blob(data=b"\x00" * 300_000))
    assert env.queued() == before, "something was enqueued"
    await env.still_works()


async def test_a_result_that_cannot_be_stored_fails_permanently_naming_the_job(
    env: Env,
) -> None:
    handle = await env.runner.submit(BadResult())
    with pytest.raises(JobFailed) as failed:
        await handle.result(timeout=20)
    assert failed.value.reason == "permanent"
    assert "rel.bad-result" in failed.value.message
    assert "cannot be stored" in failed.value.message
    assert (await handle.join()).attempts == 1, "a permanent failure was retried"
    await env.still_works()


@pytest.mark.parametrize(
    ("job", "kind", "attempts"),
    [
        (RaisesUnprintable(permanent=False), "exhausted", 2),
        (RaisesUnprintable(permanent=True), "permanent", 1),
        (ClassifiesUnprintable(), "permanent", 1),
    ],
    ids=["transient", "permanent", "classified-permanent"],
)
async def test_an_exception_whose_str_raises_is_recorded_as_unprintable(
    env: Env, job: Job[Any], kind: str, attempts: int
) -> None:
    handle = await env.runner.submit(job)
    outcome = await handle.join(timeout=20)
    assert outcome.status is JobStatus.FAILED and outcome.error is not None
    assert outcome.error.reason == kind, outcome.error
    assert outcome.error.message.startswith("<unprintable "), outcome.error.message
    assert outcome.attempts == attempts, outcome
    await env.still_works()


async def test_bytes_round_trip_and_a_lone_surrogate_is_refused_at_submit(env: Env) -> None:
    raw = bytes(range(256)) + b"\xff\xfe\xc3\x28\xa0\xa1\xe2\x28\xa1"
    assert await (await env.runner.submit(Blob(data=raw))).result(timeout=20) == raw
    before = env.queued()
    with pytest.raises(EncodingError, match=r"rel\.blob"):
        await env.runner.submit(Blob(data=b"ok", text="bad \ud800 text"))
    assert env.queued() == before
    await env.still_works()


async def test_step_names_that_climb_are_stored_inside_the_root(env: Env, tmp_path: Path) -> None:
    names = ["../../../escape", "..", ".", "a/../../b", "%2e%2e/x", "/abs", "\\..\\win"]
    handle = await env.runner.submit(DotSteps(names=names))
    assert await handle.result(timeout=20) == names
    memo_root = env.root / "memos" / handle.id
    files = [p for p in memo_root.rglob("*") if p.is_file()]
    assert len(files) == len(names), files
    for path in files:
        assert path.resolve().is_relative_to(memo_root.resolve()), path
    outside = names_in(tmp_path)
    assert outside == {"store", "events.log", "logs"}, outside
    assert not list(tmp_path.parent.glob("escape*"))
    await env.still_works()


async def test_store_keys_with_dot_dot_are_invalid(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    try:
        for key in ["../x", "a/../../x", "..", "a/..", "/etc/passwd", "a//b", "./a"]:
            with pytest.raises(InvalidKey):
                await store.put(key, b"x")
            with pytest.raises(InvalidKey):
                await store.get(key)
        with pytest.raises(ValueError, match="invalid run id"):
            from stepstone.runtime.store_queue import StoreQueue

            await StoreQueue(store).enqueue(b"x", id="../x")
    finally:
        await store.close()
    assert names_in(tmp_path) == {"store"}
