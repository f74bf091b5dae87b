"""``stepstone show`` names a run's parent and children, and ``stepstone
cancel`` of a parent, from another process, cancels its live children with
it (``--leave-children`` leaves them); the web view says the same."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, ClassVar

from cli_support import DEADLINE, Cli

from stepstone import Job, JobContext, JobRunner, JobStatus
from stepstone.testing import wait_until


class Branch(Job[Any]):
    NAME: ClassVar[str] = "cli.family.branch"
    key: str

    def idempotency_key(self) -> str:
        return f"branch:{self.key}"

    async def run(self, ctx: JobContext) -> Any:
        return await ctx.wait_for_event("go")


class Tree(Job[list[Any]]):
    NAME: ClassVar[str] = "cli.family.tree"
    name: str
    n: int

    async def run(self, ctx: JobContext) -> list[Any]:
        branches = [await ctx.submit(Branch(key=f"{self.name}-{i}")) for i in range(self.n)]
        return await ctx.gather(*branches)


async def _status(runner: JobRunner, run_id: str) -> JobStatus | None:
    state = await runner.status(run_id)
    return None if state is None else state.status


async def test_show_names_the_family_and_cancel_takes_the_children_with_it(
    cli: Cli, store_dir: Path
) -> None:
    store = ("--store", str(store_dir))
    runner = JobRunner(str(store_dir), jobs=[Tree, Branch], poll_interval=0.05, concurrency=4)
    async with runner:
        trees = [await runner.submit(Tree(name=name, n=3)) for name in ("cut", "kept")]
        branches = {
            name: [runner.handle(Branch(key=f"{name}-{i}")).id for i in range(3)]
            for name in ("cut", "kept")
        }
        for run_id in [*branches["cut"], *branches["kept"]]:
            await wait_until(
                lambda r=run_id: _is(runner, r, JobStatus.WAITING_FOR_EVENT), timeout=DEADLINE
            )
        shown = await asyncio.to_thread(cli, "show", trees[0].id, *store)
        assert shown.status == 0, shown.err
        assert "children" in shown.out and branches["cut"][0][:12] in shown.out
        assert "a cancel takes the live ones it created with it" in shown.out
        detail = (await asyncio.to_thread(cli, "show", branches["cut"][0], "--json", *store)).json()
        assert detail["parent"] == trees[0].id

        cancelled = await asyncio.to_thread(cli, "cancel", trees[0].id, *store)
        assert cancelled.status == 0, cancelled.err
        left = await asyncio.to_thread(cli, "cancel", trees[1].id, "--leave-children", *store)
        assert left.status == 0, left.err
        for run_id in branches["cut"]:
            assert await _status(runner, run_id) is JobStatus.CANCELLED
        child = await asyncio.to_thread(cli, "show", branches["cut"][1], *store)
        assert f"cancelled with its parent {trees[0].id}" in child.out
        for run_id in branches["kept"]:
            await runner.send_event(run_id, "go", "on")
            assert await runner.handle(run_id, Branch).result(timeout=DEADLINE) == "on"


async def _is(runner: JobRunner, run_id: str, status: JobStatus) -> bool:
    return await _status(runner, run_id) is status
