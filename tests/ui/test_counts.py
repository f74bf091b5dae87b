"""The web view counts attempts as everything else does (docs/guarantees.md,
"What a worker's crash costs a run"): a run whose worker died under it, its
lease taken over, shows one attempt, and its lapse, on its page and in the
list; a run waiting for an event shows the attempt it paused, as ``ls``
does. In a real headless browser."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from test_browser import rows, text
from ui_kit import DEADLINE, serve, wait_for

from stepstone import Job, JobContext, JobRunner, JobStatus
from stepstone.testing import wait_until

LEASE = 0.5


class Survivor(Job[int]):
    NAME: ClassVar[str] = "counts.survivor"

    async def run(self, ctx: JobContext) -> int:
        return ctx.attempt


class Paused(Job[str]):
    NAME: ClassVar[str] = "counts.paused"

    async def run(self, ctx: JobContext) -> str:
        said: str = await ctx.wait_for_event("go")
        return said


@pytest.fixture
async def counted(store_url: str) -> AsyncIterator[tuple[str, str, str]]:
    """A run taken over once from a worker that died (its claim is made by
    hand, then left to lapse), and a run waiting for an event."""
    submitter = JobRunner(store_url)
    survivor = await submitter.submit(Survivor())
    [died] = await submitter.queue.claim(1, lease=LEASE)  # a worker that then died
    await submitter.close()
    await wait_until(lambda: time.time() > died.lease_expires_at, timeout=DEADLINE)
    async with JobRunner(store_url, jobs=[Survivor, Paused], poll_interval=0.05) as worker:
        assert await worker.handle(survivor.id, Survivor).result(timeout=DEADLINE) == 1
        paused = await worker.submit(Paused())

        async def waiting() -> bool:
            state = await worker.status(paused.id)
            return state is not None and state.status is JobStatus.WAITING_FOR_EVENT

        await wait_until(waiting, timeout=DEADLINE)
    yield store_url, survivor.id, paused.id


async def test_attempts_and_lapses_are_counted_as_everywhere(
    counted: tuple[str, str, str], browser: Any, tmp_path: Path
) -> None:
    store, survivor, paused = counted
    with serve(store, tmp_path) as view_url:
        browser.get(view_url)
        wait_for(lambda: {survivor, paused} <= set(rows(browser)), "both runs listed")
        listed = rows(browser)
        assert (listed[survivor]["attempts"], listed[paused]["attempts"]) == ("1", "1")

        browser.get(f"{view_url}runs/{survivor}")
        summary = text(browser, "dl.summary")
        assert "Attempts\n1\n" in summary or "Attempts\t1" in summary, summary
        assert "1 lease(s) lost to workers that died or hung (no attempt spent)" in summary
        assert "after 1 attempt(s)" in text(browser, "#outcome")

        browser.get(f"{view_url}runs/{paused}")
        summary = text(browser, "dl.summary")
        assert "1 of 3" in summary, summary  # the attempt it paused, as ls counts it
        assert "lease(s) lost" not in summary
