"""Streams: what a run writes with ``ctx.stream(name).write(value)`` is read
in order, live, from any process, each item once whatever retries and
replays the run goes through, and goes with the run when it is swept.

Each scenario runs on the MemoryQueue, and on the StoreQueue over memory, a
real directory and moto's S3 (wf_support.ON_EVERY_STORE).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from talk_jobs import TALK_JOBS, Branches, Large, Token, Tokens, WritesAfterClose
from wf_jobs import Counters
from wf_support import ON_EVERY_STORE

from stepstone import (
    BadStreamItem,
    InvalidRunId,
    Job,
    JobContext,
    JobRunner,
    JobStatus,
    NonDeterministicReplay,
    RunNotFound,
    StreamItem,
)
from stepstone.records.layout import Layout
from stepstone.records.retention import remove_run
from stepstone.store import ObjectStore
from stepstone.testing import run_job, wait_until

pytestmark = ON_EVERY_STORE

READ = 20.0
"""Seconds a read of a whole stream may take before the test fails."""


@pytest.fixture
def make_talker(make_runner: Callable[..., JobRunner]) -> Callable[..., JobRunner]:
    def make(**kwargs: Any) -> JobRunner:
        kwargs.setdefault("jobs", TALK_JOBS)
        return make_runner(**kwargs)

    return make


async def items_of(store: ObjectStore, run_id: str) -> list[str]:
    """The keys of every stream item a run has, in key order."""
    return [info.key async for info in store.scan(Layout().streams(run_id))]


async def read_all(reader: Any) -> list[Any]:
    async with asyncio.timeout(READ):
        return [value async for value in reader]


async def test_a_stream_is_read_live_in_order_and_ends_at_its_close(
    make_talker: Callable[..., JobRunner],
) -> None:
    async with make_talker() as runner:
        handle = await runner.submit(Tokens(key="live", count=6, pause_after=3))
        got: list[int] = []

        async def read() -> None:
            async for token in handle.stream("tokens", Token):
                got.append(token.n)

        reading = asyncio.create_task(read())
        # Read while the run goes on: it waits for "more" after three tokens.
        await wait_until(lambda: got == [0, 1, 2], message="the first three tokens, live")
        await wait_until(
            lambda: _is(runner, handle.id, JobStatus.WAITING_FOR_EVENT), message="the run waits"
        )
        assert not reading.done(), "the reader ended while the run was still going"
        await runner.send_event(handle.id, "more")
        async with asyncio.timeout(READ):
            await reading
        assert got == [0, 1, 2, 3, 4, 5]
        assert await handle == 6


async def test_a_process_that_never_held_the_handle_reads_by_run_id_or_by_key(
    make_talker: Callable[..., JobRunner],
) -> None:
    async with make_talker():
        api = make_talker()  # a runner that runs no worker: an API process
        job = Tokens(key="api", count=4, close=False)
        handle = await api.submit(job)
        by_id = await read_all(api.stream(handle.id, "tokens", Token))
        by_key = await read_all(api.stream(job, "tokens", Token))
        untyped = await read_all(api.stream(handle.id, "tokens"))
        # Not closed: each read ended with the run.
        assert [t.n for t in by_id] == [t.n for t in by_key] == [0, 1, 2, 3]
        assert untyped[0] == {"text": "t0", "n": 0}, "without a type, the value as stored"
        assert await api.handle(handle.id, Tokens).result(timeout=READ) == 4


async def test_reading_from_an_offset_and_without_following(
    make_talker: Callable[..., JobRunner],
) -> None:
    async with make_talker() as runner:
        handle = await runner.submit(Tokens(key="offsets", count=6, pause_after=3))
        await wait_until(
            lambda: _is(runner, handle.id, JobStatus.WAITING_FOR_EVENT), message="the run waits"
        )
        now = await read_all(handle.stream("tokens", Token, follow=False))
        assert [t.n for t in now] == [0, 1, 2], "without following: what is written, then stop"
        reader = handle.stream("tokens", Token, start=2)
        await runner.send_event(handle.id, "more")
        async with asyncio.timeout(READ):
            items = [item async for item in reader.items()]
        assert [(i.offset, i.value.n) for i in items] == [(2, 2), (3, 3), (4, 4), (5, 5)]
        assert reader.offset == 6
        assert isinstance(items[0], StreamItem)
        await handle
        again = await read_all(handle.stream("tokens", Token, start=5))
        assert [t.n for t in again] == [5]
        assert await read_all(handle.stream("tokens", start=6)) == []
        with pytest.raises(ValueError, match="offset"):
            handle.stream("tokens", start=-1)


async def test_a_retried_attempt_writes_no_item_twice(
    make_talker: Callable[..., JobRunner], counters: Counters, store: ObjectStore
) -> None:
    async with make_talker() as runner:
        handle = await runner.submit(Tokens(key="retry", count=5, fail_after=3))
        assert await handle.result(timeout=READ) == 5
        tokens = await read_all(handle.stream("tokens", Token))
        stored = await items_of(runner.store, handle.id)
        assert (await runner.status(handle.id)) is not None
    assert [t.n for t in tokens] == [0, 1, 2, 3, 4]
    assert len(stored) == 6, f"5 items and the close, each once: {stored}"
    # The job's code after each write ran again on the retry; the writes did not.
    assert [counters.counts[f"wrote:retry:{n}"] for n in range(5)] == [2, 2, 2, 1, 1]


async def test_concurrent_branches_write_each_item_once_each_in_its_order(
    make_talker: Callable[..., JobRunner],
) -> None:
    async with make_talker() as runner:
        handle = await runner.submit(Branches(branches=3, each=6, fail_after=2))
        assert await handle.result(timeout=READ) == 18
        values = await read_all(handle.stream("mixed"))
        stored = await items_of(runner.store, handle.id)
    assert sorted(values) == sorted(f"b{b}-{i}" for b in range(3) for i in range(6))
    for b in range(3):
        mine = [v for v in values if v.startswith(f"b{b}-")]
        assert mine == [f"b{b}-{i}" for i in range(6)], "a branch's items out of its order"
    offsets = sorted(int(key.rsplit("/", 1)[-1]) for key in stored)
    assert offsets == list(range(18)), "offsets left unwritten, or an item written twice"


async def test_values_are_typed_and_large_ones_work(
    make_talker: Callable[..., JobRunner],
) -> None:
    size = 3 << 20  # over the size a record keeps a value apart from its other fields
    async with make_talker() as runner:
        handle = await runner.submit(Large(size=size))
        await handle.result(timeout=60)
        blob, text, small = await read_all(handle.stream("blobs"))
        assert blob == bytes(range(256)) * (size // 256)
        assert text == "x" * size
        assert small == {"small": True}
        async for typed in handle.stream("blobs", bytes):
            assert typed == blob
            break


async def test_a_reader_of_another_type_is_told_which_item(
    make_talker: Callable[..., JobRunner],
) -> None:
    async with make_talker() as runner:
        handle = await runner.submit(Tokens(key="typed", count=2))
        await handle.result(timeout=READ)
        with pytest.raises(BadStreamItem) as caught:
            await read_all(handle.stream("tokens", int))
    assert caught.value.offset == 0 and caught.value.name == "tokens"
    assert handle.id in str(caught.value) and "streams/" in str(caught.value)


async def test_a_write_after_close_is_refused_and_reading_a_missing_run_says_so(
    make_talker: Callable[..., JobRunner],
) -> None:
    async with make_talker() as runner:
        said = await run_job(runner, WritesAfterClose())
        assert "stream 's' is closed" in said
        with pytest.raises(RunNotFound, match="no run"):
            await read_all(runner.stream("0" * 32, "tokens"))
        with pytest.raises(InvalidRunId):
            runner.stream("not a run", "tokens")


async def test_stream_items_are_swept_with_their_run(
    make_talker: Callable[..., JobRunner],
) -> None:
    async with make_talker() as runner:
        handle = await runner.submit(Tokens(key="swept", count=3))
        await handle.result(timeout=READ)
        assert len(await items_of(runner.store, handle.id)) == 4
        await remove_run(runner, handle.id)  # (what the sweep does to a run past the window)
        assert await items_of(runner.store, handle.id) == []
        with pytest.raises(RunNotFound):
            await read_all(handle.stream("tokens"))


async def _is(runner: JobRunner, run_id: str, status: JobStatus) -> bool:
    state = await runner.status(run_id)
    return state is not None and state.status is status


async def test_a_replay_that_writes_where_a_step_was_recorded_diverges(
    make_runner: Callable[..., JobRunner],
) -> None:
    """A stream write is a call of the run's history: code that now writes
    where its run recorded a step is caught before it writes."""

    class Before(Job[int]):
        NAME = "talk.diverge"

        async def run(self, ctx: JobContext) -> int:
            await ctx.step("a", lambda: 1)
            await ctx.wait_for_event("go")
            return 1

    class After(Job[int]):
        NAME = "talk.diverge"

        async def run(self, ctx: JobContext) -> int:
            await ctx.stream("s").write("instead of a step")
            await ctx.wait_for_event("go")
            return 2

    async with make_runner(jobs=[Before]) as first:
        handle = await first.submit(Before())
        await wait_until(
            lambda: _is(first, handle.id, JobStatus.WAITING_FOR_EVENT), message="it waits"
        )
    async with make_runner(jobs=[After]) as second:
        await second.send_event(handle.id, "go")
        outcome = await second.handle(handle.id, After).join(timeout=READ)
        assert outcome.error is not None
        assert "write to stream 's'" in outcome.error.message
        assert NonDeterministicReplay.__name__ in (outcome.error.error_type or "")
        assert await items_of(second.store, handle.id) == [], "the divergent write landed"
