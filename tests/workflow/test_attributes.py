"""Attributes: given at submit (``SubmitOptions(attributes=...)``) or set
inside a run (``ctx.set_attributes``, recorded like a step), found by
``runner.runs(attributes=...)`` through the index under ``index/attr/``
rather than by reading every run, swept with the run; names and values are
checked before anything is written. On every store (memory with the
MemoryQueue and the StoreQueue, files, SQLite, S3 on moto)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from wf_jobs import Adder, Counters, Keyed

from stepstone import (
    InvalidAttribute,
    Job,
    JobContext,
    JobRunner,
    JobStatus,
    Permanent,
    SubmitOptions,
)
from stepstone.ops.reads import detail
from stepstone.records.attributes import ORPHAN_AGE, entry_key
from stepstone.records.index_sweep import sweep_index
from stepstone.records.retention import remove_run, sweep
from stepstone.runtime import FakeClock
from stepstone.store import CountingStore, MemoryStore
from stepstone.testing import wait_until

EVERY_STORE = pytest.mark.parametrize(
    "make_runner", ["memory-queue", "store-queue", "files", "sqlite", "s3"], indirect=True
)

MakeRunner = Callable[..., JobRunner]
DEADLINE = 10.0


class Tagging(Job[str]):
    """Sets attributes after a step; fails its first attempt after that, so
    the second replays the call."""

    NAME: ClassVar[str] = "test.tagging"
    plan: str
    fail_once: bool = False

    async def run(self, ctx: JobContext) -> str:
        await ctx.step("work", lambda: "done")
        await ctx.set_attributes({"plan": self.plan, "stage": "first"})
        await ctx.set_attributes({"stage": "second"})
        await ctx.step("after", lambda: "after")
        if self.fail_once and ctx.attempt == 1:
            raise RuntimeError("once")
        assert dict(ctx.attributes)["stage"] == "second"
        return ",".join(f"{k}={v}" for k, v in sorted(ctx.attributes.items()))


class SyncTagging(Job[str]):
    """A synchronous job: ``ctx.sync.set_attributes``."""

    NAME: ClassVar[str] = "test.sync-tagging"

    def run(self, ctx: JobContext) -> str:  # type: ignore[override]
        ctx.sync.set_attributes({"stage": "sync"})
        return dict(ctx.attributes)["stage"]


class BadTag(Job[int]):
    NAME: ClassVar[str] = "test.bad-tag"

    async def run(self, ctx: JobContext) -> int:
        await ctx.set_attributes({"tenant": "a\tb"})
        return 1


class Declined(Job[int]):
    NAME: ClassVar[str] = "test.declined"

    async def run(self, ctx: JobContext) -> int:
        raise Permanent("card declined")


async def _index_keys(runner: JobRunner) -> list[str]:
    return [info.key async for info in runner.store.scan("index/")]


@EVERY_STORE
async def test_runs_are_found_by_the_attributes_they_were_submitted_with(
    make_runner: MakeRunner, clock: FakeClock
) -> None:
    tenants = ["acme", "acme", "beta", "acme", "gamma"]
    plans = ["pro", "free", "pro", "pro", "pro"]
    async with make_runner(jobs=[Adder]) as runner:
        handles = [
            await runner.submit(Adder(a=n, b=0), SubmitOptions(attributes={"tenant": t, "plan": p}))
            for n, (t, p) in enumerate(zip(tenants, plans, strict=True))
        ]
        for handle in handles:
            await handle.result(timeout=DEADLINE)
        unfiltered = await runner.submit(Adder(a=9, b=9))
        await unfiltered.result(timeout=DEADLINE)
    # A run that stays queued (no worker runs it) is found too.
    clock.advance(1)
    queued_runner = make_runner(jobs=[Adder])
    queued = await queued_runner.submit(
        Adder(a=7, b=7), SubmitOptions(attributes={"tenant": "acme"})
    )

    acme = await queued_runner.runs(attributes={"tenant": "acme"})
    want = {handles[0].id, handles[1].id, handles[3].id, queued.id}
    assert {row.id for row in acme} == want
    assert acme[0].id == queued.id  # newest first
    by_id = {row.id: row for row in acme}
    assert by_id[handles[1].id].attributes == {"tenant": "acme", "plan": "free"}
    assert by_id[queued.id].status is JobStatus.READY
    both = await queued_runner.runs(attributes={"tenant": "acme", "plan": "pro"})
    assert {row.id for row in both} == {handles[0].id, handles[3].id}
    finished = await queued_runner.runs(attributes={"tenant": "acme"}, status="succeeded")
    assert {row.id for row in finished} == want - {queued.id}
    ready = await queued_runner.runs(attributes={"tenant": "acme"}, status=JobStatus.READY)
    assert [row.id for row in ready] == [queued.id]
    assert await queued_runner.runs(attributes={"tenant": "nobody"}) == []
    assert (await detail(queued_runner, queued.id)).attributes == {"tenant": "acme"}
    assert len(await queued_runner.runs(attributes={"tenant": "acme"}, limit=2)) == 2


@EVERY_STORE
async def test_a_failed_run_is_listed_as_every_listing_lists_it(make_runner: MakeRunner) -> None:
    """A run that failed for good (dead, with a failed outcome beside its
    queue record) is the row a listing without attributes shows, each status asked."""
    async with make_runner(jobs=[Declined]) as runner:
        handle = await runner.submit(Declined(), SubmitOptions(attributes={"tenant": "acme"}))
        assert not (await handle.join(timeout=DEADLINE)).ok
    for status in (None, "failed", "dead", "succeeded"):
        plain = [row for row in await runner.runs(status=status) if row.id == handle.id]
        found = await runner.runs(attributes={"tenant": "acme"}, status=status)
        assert [(r.id, r.status, r.source) for r in found] == [
            (r.id, r.status, r.source) for r in plain
        ], status


@EVERY_STORE
async def test_attributes_set_in_a_run_are_recorded_like_a_step(make_runner: MakeRunner) -> None:
    async with make_runner(jobs=[Tagging]) as runner:
        handle = await runner.submit(
            Tagging(plan="pro", fail_once=True), SubmitOptions(attributes={"tenant": "acme"})
        )
        assert await handle.result(timeout=DEADLINE) == "plan=pro,stage=second,tenant=acme"
        [row] = await runner.runs(attributes={"stage": "second"})
        assert row.id == handle.id
        assert row.attributes == {"tenant": "acme", "plan": "pro", "stage": "second"}
        assert row.attempts == 2
        shown = await detail(runner, handle.id)  # (stepstone show, the run's page)
        assert shown.attributes == {"tenant": "acme", "plan": "pro", "stage": "second"}
        # The value it replaced finds it no more, and left no entry behind.
        assert await runner.runs(attributes={"stage": "first"}) == []
        assert await runner.runs(attributes={"tenant": "acme", "plan": "pro"}) != []
        keys = await _index_keys(runner)
        assert not any("/stage/first/" in key for key in keys)
        assert len(keys) == 3  # tenant, plan, stage: one entry each


@EVERY_STORE
async def test_a_synchronous_job_sets_attributes(make_runner: MakeRunner) -> None:
    async with make_runner(jobs=[SyncTagging]) as runner:
        handle = await runner.submit(SyncTagging())
        assert await handle.result(timeout=DEADLINE) == "sync"
        [row] = await runner.runs(attributes={"stage": "sync"})
        assert row.id == handle.id and row.attributes == {"stage": "sync"}


@EVERY_STORE
async def test_a_run_setting_a_bad_attribute_fails_at_once_saying_which(
    make_runner: MakeRunner,
) -> None:
    async with make_runner(jobs=[BadTag]) as runner:
        outcome = await (await runner.submit(BadTag())).join(timeout=DEADLINE)
    assert not outcome.ok and outcome.attempts == 1
    assert outcome.error is not None and outcome.error.reason == "permanent"
    assert "ctx.set_attributes: attribute 'tenant'" in outcome.error.message
    assert "U+0009" in outcome.error.message
    assert await _index_keys(runner) == []


@EVERY_STORE
async def test_a_replay_is_found_by_the_attributes_of_the_run_it_replays(
    make_runner: MakeRunner,
) -> None:
    async with make_runner(jobs=[Tagging]) as runner:
        handle = await runner.submit(Tagging(plan="pro"), SubmitOptions(attributes={"tenant": "a"}))
        await handle.result(timeout=DEADLINE)
    # From the start (the calls made again), then from a step after them
    # (their memos copied, and the index written for the new incarnation).
    for from_step in (None, "after"):
        async with make_runner(jobs=[Tagging]) as again:
            replayed = await again.replay(handle.id, from_step=from_step)
            await _until_finished(again, handle.id)
            [row] = await again.runs(attributes={"tenant": "a", "stage": "second"})
            assert row.id == handle.id and row.status is JobStatus.SUCCEEDED
            assert row.attributes == {"tenant": "a", "plan": "pro", "stage": "second"}
            assert await again.runs(attributes={"stage": "first"}) == []
        # The entries of the incarnation it replaced went with it.
        keys = await _index_keys(again)
        assert len(keys) == 3 and all(replayed.incarnation in key for key in keys), from_step


async def _until_finished(runner: JobRunner, run_id: str) -> None:
    async def finished() -> bool:
        state = await runner.status(run_id)
        return state is not None and state.status.finished

    await wait_until(finished, timeout=10, interval=0.025, message=f"run {run_id} finished")


@EVERY_STORE
async def test_a_swept_run_leaves_no_index_entry(make_runner: MakeRunner, clock: FakeClock) -> None:
    async with make_runner(jobs=[Tagging]) as runner:
        handle = await runner.submit(Tagging(plan="pro"), SubmitOptions(attributes={"tenant": "a"}))
        await handle.result(timeout=DEADLINE)
        other = await runner.submit(Tagging(plan="free"), SubmitOptions(attributes={"tenant": "b"}))
        await other.result(timeout=DEADLINE)
    assert len(await _index_keys(runner)) == 6
    await remove_run(runner, handle.id)  # (what `stepstone purge` does to each run)
    assert [k for k in await _index_keys(runner) if handle.id in k] == []
    assert len(await _index_keys(runner)) == 3
    clock.set(max(clock.now(), time.time()) + 3600)  # (a durable store dates by its own clock)
    assert await sweep(runner, retention=60) == 1
    assert await _index_keys(runner) == []
    assert await runner.runs(attributes={"tenant": "b"}) == []


@EVERY_STORE
async def test_a_duplicate_keyed_submit_takes_its_entries_back(make_runner: MakeRunner) -> None:
    runner = make_runner(jobs=[Keyed])  # no worker: the first run stays live
    options = SubmitOptions(attributes={"tenant": "acme"})
    first = await runner.submit(Keyed(n=1), options)
    again = await runner.submit(Keyed(n=1), options)
    assert again.id == first.id and not again.newly_submitted
    assert len(await _index_keys(runner)) == 1  # (the second submit's entry was taken back)
    [row] = await runner.runs(attributes={"tenant": "acme"})
    assert row.id == first.id
    many = await runner.submit_many([Keyed(n=1), Keyed(n=2)], options)
    assert [h.newly_submitted for h in many] == [False, True]
    assert len(await _index_keys(runner)) == 2


@EVERY_STORE
async def test_bad_names_and_values_are_refused_before_anything_is_written(
    make_runner: MakeRunner,
) -> None:
    runner = make_runner(jobs=[Adder])
    cases: list[tuple[Any, str]] = [
        ({"": "x"}, "attribute name '' is not allowed"),
        ({"1st": "x"}, "starting with a letter"),
        ({"a/b": "x"}, "attribute name 'a/b' is not allowed"),
        ({"t" * 41: "x"}, "1 to 40"),
        ({"tenant": ""}, "attribute 'tenant' has an empty value"),
        ({"tenant": 5}, "must have a str value, not int"),
        ({"tenant": "x" * 65}, "a value of 65 bytes; at most 64"),
        ({"tenant": "é" * 33}, "a value of 66 bytes"),
        ({"tenant": "a\nb"}, "control or format character U+000A"),
        ({"tenant": "a\u202eb"}, "U+202E"),
        ({f"n{i}": "v" for i in range(17)}, "17 attributes; a run may have at most 16"),
        (["tenant"], "must be a mapping"),
    ]
    for attributes, said in cases:
        with pytest.raises(InvalidAttribute, match=re.escape(said)):
            await runner.submit(Adder(a=1, b=1), SubmitOptions(attributes=attributes))
    with pytest.raises(InvalidAttribute, match="attribute name 'a b'"):
        await runner.runs(attributes={"a b": "x"})
    assert [info.key async for info in runner.store.scan("")] == []
    # Values may be any printable text: slashes, dots, spaces, other scripts.
    for value in ("a/b", ".", "..", "x y", "東京", "%2F", "a=b"):
        handle = await runner.submit(Adder(a=1, b=1), SubmitOptions(attributes={"v": value}))
        [row] = await runner.runs(attributes={"v": value})
        assert row.id == handle.id, value


@EVERY_STORE
async def test_an_entry_that_names_no_run_is_left_out_then_removed(
    make_runner: MakeRunner, clock: FakeClock
) -> None:
    runner = make_runner(jobs=[Adder])
    real = await runner.submit(Adder(a=1, b=1), SubmitOptions(attributes={"tenant": "acme"}))
    # What a submit that crashed between its index entry and its enqueue leaves.
    orphan = entry_key(runner.layout, "tenant", "acme", "ab" * 16, "cd" * 8)
    await runner.store.put(orphan, b"")
    assert [row.id for row in await runner.runs(attributes={"tenant": "acme"})] == [real.id]
    assert orphan in await _index_keys(runner)  # (young: its submit may be under way)
    if not isinstance(runner.store, MemoryStore):
        return  # (a durable store's own clock dates it: the fake clock cannot age it)
    clock.advance(ORPHAN_AGE + 1)
    assert [row.id for row in await runner.runs(attributes={"tenant": "acme"})] == [real.id]
    assert orphan not in await _index_keys(runner)
    assert len(await _index_keys(runner)) == 1
    # One no listing meets goes with the hourly sweep of the index; the
    # entries of a live run (it has a queue record) and of a finished one stay.
    other = entry_key(runner.layout, "plan", "pro", "ef" * 16, "cd" * 8)
    await runner.store.put(other, b"")
    finished = await runner.submit(Adder(a=2, b=2), SubmitOptions(attributes={"plan": "pro"}))
    async with make_runner(jobs=[Adder]) as worker:
        await worker.handle(finished.id, Adder).result(timeout=DEADLINE)
    assert await sweep_index(runner) == 0  # (young)
    clock.advance(ORPHAN_AGE + 1)
    assert await sweep_index(runner) == 1
    assert len(await _index_keys(runner)) == 2


async def test_a_filtered_listing_reads_the_runs_that_match_not_the_others(
    clock: FakeClock, counters: Counters
) -> None:
    counted = CountingStore(MemoryStore(clock=clock.now))
    runner = JobRunner(counted, clock=clock, jobs=[Adder], state=[counters])
    jobs = [Adder(a=n, b=0) for n in range(1000)]
    await runner.submit_many(jobs[:5], SubmitOptions(attributes={"tenant": "acme"}))
    await runner.submit_many(jobs[5:], SubmitOptions(attributes={"tenant": "other"}))
    counted.reset()
    rows = await runner.runs(attributes={"tenant": "acme"})
    assert len(rows) == 5
    # One LIST of the index; a GET of each run's outcome (none: live) and one
    # of its queue record: nothing of the 995 others.
    assert counted.counts["LIST"] == 1
    assert counted.counts["GET"] == 10
    assert counted.total == 11
