"""Every action the web view offers on a run, reached by the run's
idempotency key, in a real headless browser: the search box takes the key
to the run's page (a link ``/?q=<key>`` does the same), and each action
there (send an event, cancel, retry, replay) acts on that run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from test_actions import confirm, fill
from test_browser import click, text
from test_find import find
from ui_kit import DEADLINE, serve, wait_for

from stepstone import IdempotencyKey, Job, JobContext, JobRunner, JobStatus, Permanent
from stepstone.testing import wait_until


class Parcel(Job[str]):
    """Waits for a ``pickup`` event, keyed by its parcel number."""

    NAME: ClassVar[str] = "depot.parcel"
    number: int

    def idempotency_key(self) -> str:
        return f"parcel:{self.number}"

    async def run(self, ctx: JobContext) -> str:
        said: dict[str, str] = await ctx.wait_for_event("pickup")
        return f"picked up by {said['by']}"


class Lost(Job[int]):
    """Fails for good, keyed by its claim number."""

    NAME: ClassVar[str] = "depot.lost"
    number: int

    def idempotency_key(self) -> str:
        return f"claim:{self.number}"

    async def run(self, ctx: JobContext) -> int:
        raise Permanent(f"claim {self.number} not found")


def runner(store: str) -> JobRunner:
    return JobRunner(store, jobs=[Parcel, Lost], poll_interval=0.05, retry_backoff=0.0)


@pytest.fixture
async def keyed(store_url: str) -> AsyncIterator[str]:
    """Two parcels waiting for their pickup and a dead claim; nothing runs them after."""
    async with runner(store_url) as made:
        for job in (Parcel(number=1), Parcel(number=2)):
            await made.submit(job)
        lost = await made.submit(Lost(number=7))
        assert not (await lost.join(timeout=DEADLINE)).ok

        async def parked() -> bool:
            states = [await made.status(IdempotencyKey(f"parcel:{n}")) for n in (1, 2)]
            return all(s is not None and s.status is JobStatus.WAITING_FOR_EVENT for s in states)

        await wait_until(parked, timeout=DEADLINE)
    yield store_url


async def test_each_action_on_a_run_found_by_its_key(
    keyed: str, browser: Any, tmp_path: Path
) -> None:
    first = IdempotencyKey("parcel:1").run_id
    second = IdempotencyKey("parcel:2").run_id
    lost = IdempotencyKey("claim:7").run_id
    with serve(keyed, tmp_path, "--allow-actions") as view_url:
        browser.get(view_url)
        find(browser, "parcel:1")
        wait_for(lambda: browser.current_url == f"{view_url}runs/{first}", "parcel:1's page")
        fill(browser, "nav.actions form.event", {"payload": '{"by": "ada"}'})
        click(browser, "nav.actions form.event button")
        confirm(
            browser, f'Send event \'pickup\' with {{"by": "ada"}} to waiting_for_event run {first}'
        )
        assert text(browser, "section.result") == f"sent event 'pickup' to {first}"

        browser.get(f"{view_url}?q=parcel:2")  # a link by key
        wait_for(lambda: browser.current_url == f"{view_url}runs/{second}", "parcel:2's page")
        click(browser, "nav.actions a", "Cancel…")
        confirm(browser, f"Cancel waiting_for_event run {second} (depot.parcel)?")
        assert text(browser, "section.result") == f"cancelled {second}"

        find(browser, "claim:7")
        wait_for(lambda: browser.current_url == f"{view_url}runs/{lost}", "claim:7's page")
        click(browser, "nav.actions a", "Retry…")
        confirm(browser, f"Retry dead run {lost} (depot.lost)?")
        assert text(browser, "section.result").startswith(f"requeued {lost}")

        async with runner(keyed) as working:  # a worker, to take the runs up again
            picked = working.handle(IdempotencyKey("parcel:1"), Parcel)
            assert await picked.result(timeout=DEADLINE) == "picked up by ada"
            assert not (await working.handle(IdempotencyKey("claim:7")).join(DEADLINE)).ok
            assert (await working.status(IdempotencyKey("parcel:2"))).status is JobStatus.CANCELLED  # type: ignore[union-attr]

        find(browser, "parcel:1")  # ended now: a replay is offered
        wait_for(lambda: browser.current_url == f"{view_url}runs/{first}", "parcel:1's page again")
        click(browser, "nav.actions form.replay button")
        confirm(browser, f"Replay succeeded run {first} (depot.parcel) from the start?")
        assert text(browser, "section.result").startswith(f"replaying {first} from the start")
