"""``runner.submit_many``: one write for the batch, each job answered as ``submit`` answers it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import pytest
from wf_jobs import RUNNER_JOBS, Adder, Counters, FixedKey, GatedKeyed, Keyed
from wf_support import wait_until

from stepstone import EncodingError, InputMismatch, Job, JobContext, JobRunner, SubmitOptions
from stepstone.records.layout import run_id_for_key
from stepstone.store import FileStore, SqliteStore

BOTH_SUBMIT_ORDERS = True  # (conftest: keyed submits also in a remote store's order)

MakeRunner = Callable[..., JobRunner]


async def test_each_job_runs_once_and_the_handles_come_in_order(
    runner: JobRunner, counters: Counters
) -> None:
    jobs = [Keyed(n=i) for i in range(20)]
    handles = await runner.submit_many(jobs)
    assert [h.id for h in handles] == [run_id_for_key(f"keyed:{i}") for i in range(20)]
    assert all(h.newly_submitted for h in handles)
    assert [await h for h in handles] == list(range(20))
    assert counters.counts["keyed"] == 20


async def test_unkeyed_jobs_get_ids_of_their_own(runner: JobRunner) -> None:
    handles = await runner.submit_many([Adder(a=i, b=1) for i in range(5)])
    assert len({h.id for h in handles}) == 5
    assert [await h for h in handles] == [1, 2, 3, 4, 5]


async def test_a_keyed_duplicate_joins_or_answers_as_submit_does(
    make_runner: MakeRunner, counters: Counters
) -> None:
    runner = make_runner(jobs=RUNNER_JOBS)
    async with runner:
        finished = await runner.submit(Keyed(n=1))
        assert await finished == 1
        live = await runner.submit(GatedKeyed(n=2))
        await wait_until(counters.started.is_set)
        handles = await runner.submit_many([Keyed(n=1), GatedKeyed(n=2), Keyed(n=3), Keyed(n=3)])
        answered, joined, new, twin = handles
        assert not answered.newly_submitted  # from its outcome
        assert not joined.newly_submitted and joined.id == live.id
        assert new.newly_submitted and not twin.newly_submitted and twin.id == new.id
        counters.gate.set()
        assert [await h for h in handles] == [1, 2, 3, 3]
    assert (counters.counts["keyed"], counters.counts["gated"]) == (2, 1)


class Measured(Job[float]):
    NAME: ClassVar[str] = "test.measured"
    x: float

    async def run(self, ctx: JobContext) -> float:
        return self.x


async def test_an_input_that_cannot_be_encoded_submits_nothing(runner: JobRunner) -> None:
    with pytest.raises(EncodingError):
        await runner.submit_many([Keyed(n=7), Measured(x=float("nan"))])
    assert await runner.status(run_id_for_key("keyed:7")) is None


async def test_an_input_mismatch_is_raised_after_the_others_are_submitted(
    runner: JobRunner,
) -> None:
    await runner.submit(FixedKey(content="alpha"))
    with pytest.raises(InputMismatch):
        await runner.submit_many([Keyed(n=8), FixedKey(content="beta"), Keyed(n=9)])
    assert await runner.handle(run_id_for_key("keyed:8"), Keyed) == 8
    assert await runner.handle(run_id_for_key("keyed:9"), Keyed) == 9


async def test_an_input_mismatch_carries_the_handles_of_the_jobs_submitted(
    runner: JobRunner,
) -> None:
    """Unkeyed jobs enqueued before the refused one get random ids: the error
    is the only way to learn them, and a retry of the batch without them
    would submit them twice."""
    await runner.submit(FixedKey(content="alpha"))
    with pytest.raises(InputMismatch) as raised:
        await runner.submit_many([Adder(a=1, b=2), FixedKey(content="beta"), Adder(a=3, b=4)])
    first, refused, last = raised.value.handles
    assert refused is None
    assert first is not None and last is not None
    assert [await first, await last] == [3, 7]
    assert "the batch's other 2 job(s) were submitted" in str(raised.value)


async def test_options_apply_to_every_job(runner: JobRunner) -> None:
    handles = await runner.submit_many(
        [Adder(a=1, b=1), Adder(a=2, b=2)], SubmitOptions(priority=1, headers={"batch": "b1"})
    )
    for handle in handles:
        record = await runner.queue.get(handle.id)
        if record is not None:  # (or already run)
            assert (record.priority, dict(record.headers)) == (1, {"batch": "b1"})
    assert [await h for h in handles] == [2, 4]


async def test_on_files_the_batch_is_made_durable_with_one_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hundred jobs, one ``fdatasync`` of the create journal, no flush of
    the filesystem on the way (the checkpoint that retires the journal later
    is held off here)."""
    import stepstone.store.file.commit as commit_module
    import stepstone.store.file.journal as journal_module
    import stepstone.store.file.store as store_module

    monkeypatch.setattr(store_module, "CHECKPOINT_DELAY", 60.0)
    flushes: list[str] = []

    def counted(name: str, real: Callable[[int], None]) -> Callable[[int], None]:
        def flush(fd: int) -> None:
            flushes.append(name)
            real(fd)

        return flush

    runner = JobRunner(FileStore(tmp_path), jobs=[Keyed], state=[Counters()])
    await runner.submit(Keyed(n=-1))  # the journal is made (and flushed) on first use
    monkeypatch.setattr(journal_module.os, "fdatasync", counted("fdatasync", os.fdatasync))
    monkeypatch.setattr(journal_module.os, "fsync", counted("fsync", os.fsync))
    for module in (commit_module, store_module):
        monkeypatch.setattr(module, "syncfs", counted("syncfs", module.syncfs))
    handles = await runner.submit_many([Keyed(n=i) for i in range(100)])
    assert flushes == ["fdatasync"]
    assert all(h.newly_submitted for h in handles)
    async with runner:
        assert [await h for h in handles] == list(range(100))
    await runner.close()


async def test_on_a_sqlite_file_the_batch_is_made_in_one_transaction(tmp_path: Path) -> None:
    """A hundred jobs, one transaction: one commit, one sync of the log."""
    store = SqliteStore(tmp_path / "jobs.db")
    runner = JobRunner(store, jobs=[Keyed], state=[Counters()])
    before = store.commits
    handles = await runner.submit_many([Keyed(n=i) for i in range(100)])
    assert store.commits == before + 1
    assert all(h.newly_submitted for h in handles)
    async with runner:
        assert [await h for h in handles] == list(range(100))
    await runner.close()
    await store.close()
