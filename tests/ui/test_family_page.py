"""The web view's run page names a run's parent and children, says a cancel
takes the live children with it, and a child cancelled so says why."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any, ClassVar

from conftest import DEADLINE, serve

from stepstone import Job, JobContext, JobRunner, JobStatus
from stepstone.testing import wait_until


class Leaf(Job[Any]):
    NAME: ClassVar[str] = "ui.family.leaf"
    key: str

    def idempotency_key(self) -> str:
        return f"leaf:{self.key}"

    async def run(self, ctx: JobContext) -> Any:
        return await ctx.wait_for_event("go")


class Stem(Job[list[Any]]):
    NAME: ClassVar[str] = "ui.family.stem"

    async def run(self, ctx: JobContext) -> list[Any]:
        return await ctx.gather(*[await ctx.submit(Leaf(key=f"leaf-{i}")) for i in range(2)])


def page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        body: str = response.read().decode()
        return body


async def _waiting(runner: JobRunner, run_id: str) -> bool:
    state = await runner.status(run_id)
    return state is not None and state.status is JobStatus.WAITING_FOR_EVENT


async def test_the_run_page_names_parent_and_children_and_why_a_child_was_cancelled(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    runner = JobRunner(str(store), jobs=[Stem, Leaf], poll_interval=0.05, concurrency=3)
    async with runner:
        stem = await runner.submit(Stem())
        leaves = [runner.handle(Leaf(key=f"leaf-{i}")).id for i in range(2)]
        for leaf in leaves:
            await wait_until(lambda r=leaf: _waiting(runner, r), timeout=DEADLINE)
        assert await runner.cancel(stem.id) is True
    with serve(str(store), tmp_path) as url:
        html = page(f"{url}runs/{stem.id}")
        assert "<dt>Children</dt>" in html
        assert all(f'runs/{leaf}"' in html for leaf in leaves)
        assert "a cancel takes the live ones it created with it" in html
        html = page(f"{url}runs/{leaves[0]}")
        assert f'runs/{stem.id}"' in html and "<dt>Parent</dt>" in html
        assert f"the job was cancelled with its parent {stem.id}" in html
