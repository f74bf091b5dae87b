"""Every key a job builds fits every backend, whatever its step names and the
runner's prefix: a key refused after a step's function ran would repeat the
function on every attempt."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import pytest
from wf_jobs import Counters
from wf_support import wait_until

from stepstone import Job, JobContext, JobRunner
from stepstone.ops.reads import list_memos
from stepstone.store import FileStore, ObjectStore, open_store

LONG_NAMES = [
    " " * 86,  # 258 bytes once percent-encoded: past a filesystem's NAME_MAX
    "x" * 300,
    "é" * 100,
    "a" * 250 + "1",  # two names that differ only past any head a key could keep
    "a" * 250 + "2",
    "@" * 90,
    "日" * 200,  # 1,800 bytes encoded: past S3's 1,024 for a whole key
]


class LongSteps(Job[list[str]]):
    """A step per name (each name twice), then a failure on the first attempt:
    the retry must replay every step from its memo."""

    NAME: ClassVar[str] = "test.long-steps"
    names: list[str]

    async def run(self, ctx: JobContext) -> list[str]:
        counters = ctx.state(Counters)

        async def effect(name: str, n: int) -> str:
            counters.hit(f"{name}#{n}")
            return f"{name[:3]}#{n}"

        done = [await ctx.step(name, effect, name, n) for n in (1, 2) for name in self.names]
        if ctx.attempt == 1:
            raise RuntimeError("fail after the steps")
        return done


class LongEvent(Job[str]):
    """Waits, with a deadline, for an event whose name is as long as any step's."""

    NAME: ClassVar[str] = "test.long-event"
    name: str

    async def run(self, ctx: JobContext) -> str:
        return str(await ctx.wait_for_event(self.name, timeout=600))


@pytest.fixture(params=["file", "s3"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ObjectStore]:
    if request.param == "file":
        opened: ObjectStore = FileStore(tmp_path / "store")
    else:  # under a bucket prefix of 301 bytes: the key budget is S3's 1,024 less it
        url = request.getfixturevalue("s3_url")
        opened = open_store(url.replace("/t?", f"/{'p' * 200}/{'p' * 100}?"))
    yield opened
    await opened.close()


async def test_long_step_names_run_once_and_replay(store: ObjectStore) -> None:
    counters = Counters()
    runner = JobRunner(
        store,
        jobs=[LongSteps],
        state=[counters],
        retry_backoff=0.0,
        poll_interval=0.05,
        prefix="tenant-" + "t" * 150,
    )
    async with runner:
        handle = await runner.submit(LongSteps(names=LONG_NAMES))
        result = await handle.result(timeout=30)
        assert (await handle.join()).attempts == 2
    assert result == [f"{name[:3]}#{n}" for n in (1, 2) for name in LONG_NAMES]
    assert counters.counts == {f"{name}#{n}": 1 for n in (1, 2) for name in LONG_NAMES}
    memos = await list_memos(runner, handle.id)
    assert len(memos) == 2 * len(LONG_NAMES)
    assert all(len(m.step_key.encode()) <= 255 for m in memos)
    # Each memo is keyed by its position and names its step in full, in order.
    assert [m.step for m in memos] == [name for _ in (1, 2) for name in LONG_NAMES]
    assert [m.position for m in memos] == list(range(1, 2 * len(LONG_NAMES) + 1))


async def test_a_long_event_name_is_waited_for_and_delivered(store: ObjectStore) -> None:
    runner = JobRunner(store, jobs=[LongEvent], poll_interval=0.05, prefix="t" * 150)
    name = " " * 86 + "é" * 100
    async with runner:
        handle = await runner.submit(LongEvent(name=name))

        async def suspended() -> bool:
            state = await handle.status()
            return state is not None and state.status == "waiting_for_event"

        await wait_until(suspended, 20)
        await runner.send_event(handle.id, name, "approved")
        assert await handle.result(timeout=20) == "approved"
    memos = await list_memos(runner, handle.id)
    assert len(memos) == 2 and all(len(m.step_key.encode()) <= 255 for m in memos), memos


def test_a_prefix_that_leaves_no_room_for_a_step_key_is_refused_at_once(s3_url: str) -> None:
    store = open_store(s3_url.replace("/t?", f"/{'/'.join(['p' * 200] * 4)}?"))
    assert store.key_limit == 1024 - 804
    with pytest.raises(ValueError, match="too long for the store"):
        JobRunner(store, prefix="q" * 100)
