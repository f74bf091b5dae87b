"""What an operator sees of runs that outlived a deploy: ``stepstone show``
and the web view name a replay's divergence (where, what the run recorded,
what the code asked for).

The runs are made by real JobRunners on a real directory; the CLI runs in
this process through ``main``, the web view through its ASGI application.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
from cli_support import DEADLINE, Result, one_line_error

from stepstone import Job, JobContext, JobFailed, JobRunner, JobStatus
from stepstone.cli import main
from stepstone.testing import wait_until
from stepstone.ui.app import create_app

DIVERGED = (
    "the replay diverged at position 1: the run recorded step 'charge', "
    "the code now asks for step 'charge-card'"
)


class Charge(Job[str]):
    NAME: ClassVar[str] = "cli.versioning.charge"
    order: str

    async def run(self, ctx: JobContext) -> str:
        receipt = await ctx.step("charge", lambda: "rcpt")
        await ctx.wait_for_event("shipped")
        return receipt


class ChargeRenamed(Charge):
    NAME: ClassVar[str] = "cli.versioning.charge"

    async def run(self, ctx: JobContext) -> str:
        receipt = await ctx.step("charge-card", lambda: "rcpt")
        await ctx.wait_for_event("shipped")
        return receipt


def runner_on(path: Path, job: type[Job[str]]) -> JobRunner:
    return JobRunner(str(path), jobs=[job], poll_interval=0.05, retry_backoff=0.0)


async def diverged_run(path: Path) -> str:
    """A run that waited under Charge and resumed under ChargeRenamed."""
    async with runner_on(path, Charge) as before:
        handle = await before.submit(Charge(order="o-1"))

        async def waiting() -> bool:
            state = await before.status(handle.id)
            return state is not None and state.status is JobStatus.WAITING_FOR_EVENT

        await wait_until(waiting, timeout=DEADLINE)
    async with runner_on(path, ChargeRenamed) as after:
        await after.send_event(handle.id, "shipped")
        with pytest.raises(JobFailed):
            await after.handle(handle.id, ChargeRenamed).result(timeout=DEADLINE)
    return handle.id


RunCli = Callable[..., Result]


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> RunCli:
    def run(*argv: str) -> Result:
        status = main(list(argv))
        captured = capsys.readouterr()
        return Result(status, captured.out, captured.err)

    return run


def test_show_names_where_a_replay_diverged(run_cli: RunCli, store_dir: Path) -> None:
    run_id = asyncio.run(diverged_run(store_dir))
    shown = run_cli("show", run_id[:12], "--store", str(store_dir))
    assert shown.status == 0, shown.err
    assert "error        permanent: NonDeterministicReplay: " + DIVERGED in shown.out
    assert "error type   stepstone.errors.NonDeterministicReplay" in shown.out
    as_json = run_cli("show", run_id, "--json", "--store", str(store_dir)).json()
    assert DIVERGED in as_json["outcome"]["error"]["message"]
    assert [(m["step"], m["position"], m["call"]) for m in as_json["memos"]] == [
        ("charge", 1, "step")
    ]


async def test_the_web_view_names_where_a_replay_diverged(store_dir: Path) -> None:
    run_id = await asyncio.to_thread(asyncio.run, diverged_run(store_dir))
    async with runner_on(store_dir, Charge) as runner:
        app = create_app(runner, refresh=0, hosts=["ui"])
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ui") as client:
            page = await client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    text = html.unescape(page.text)
    assert DIVERGED in text and "NonDeterministicReplay" in text


class Checkout(Job[str]):
    NAME: ClassVar[str] = "cli.versioning.checkout"
    order: str
    charges: ClassVar[list[str]] = []

    async def run(self, ctx: JobContext) -> str:
        quote = await ctx.step("quote", lambda: f"q-{self.order}")

        def charge() -> str:
            Checkout.charges.append(self.order)
            return f"c{len(Checkout.charges)}"

        return f"{quote} {await ctx.step('charge', charge)}"


async def checkouts(path: Path, *orders: str) -> list[str]:
    async with runner_on(path, Checkout) as runner:
        handles = [await runner.submit(Checkout(order=order)) for order in orders]
        for handle in handles:
            await handle.result(timeout=DEADLINE)
        return [handle.id for handle in handles]


async def outcome_of(path: Path, run_id: str) -> str:
    async with runner_on(path, Checkout) as runner:
        return await runner.handle(run_id, Checkout).result(timeout=DEADLINE)


def test_replay_runs_an_ended_run_again_from_a_step(run_cli: RunCli, store_dir: Path) -> None:
    Checkout.charges.clear()
    [run_id] = asyncio.run(checkouts(store_dir, "o-1"))
    store = ["--store", str(store_dir)]
    done = run_cli("replay", run_id[:12], "--from-step", "charge", *store)
    assert done.status == 0, done.err
    assert f"replaying {run_id} from step 'charge' as incarnation" in done.out
    assert "(1 memo(s) kept from incarnation" in done.out
    assert asyncio.run(outcome_of(store_dir, run_id)) == "q-o-1 c2"
    assert Checkout.charges == ["o-1", "o-1"]
    shown = run_cli("show", run_id, *store)
    assert "replay of    incarnation " in shown.out and ", from step 'charge'" in shown.out
    assert "attempts of the replaced incarnation " in shown.out
    missing = run_cli("replay", run_id, "--from-step", "refund", *store)
    one_line_error(
        missing, f"run {run_id} recorded no step 'refund' (its steps: 'quote', 'charge')"
    )


def test_replay_refuses_a_live_run_in_one_line(run_cli: RunCli, store_dir: Path) -> None:
    async def waiting() -> str:
        async with runner_on(store_dir, Charge) as runner:
            handle = await runner.submit(Charge(order="o-2"))

            async def suspended() -> bool:
                state = await runner.status(handle.id)
                return state is not None and state.status is JobStatus.WAITING_FOR_EVENT

            await wait_until(suspended, timeout=DEADLINE)
            return handle.id

    run_id = asyncio.run(waiting())
    refused = run_cli("replay", run_id, "--store", str(store_dir))
    one_line_error(refused, "is waiting_for_event: a live run cannot be replayed")


def test_replay_by_filter_counts_asks_and_replays_each(run_cli: RunCli, store_dir: Path) -> None:
    Checkout.charges.clear()
    run_ids = asyncio.run(checkouts(store_dir, "b-1", "b-2"))
    store = ["--store", str(store_dir)]
    chosen = ["--kind", "cli.versioning.checkout", "--from-step", "charge"]
    unconfirmed = run_cli("replay", *chosen, *store)
    assert "2 run(s) of kind cli.versioning.checkout match" in unconfirmed.out
    one_line_error(unconfirmed, "not confirmed: stdin is not a terminal; pass --yes")
    done = run_cli("replay", *chosen, "--yes", *store)
    assert done.status == 0, done.err
    assert "replayed 2 of 2 run(s) of kind cli.versioning.checkout" in done.out
    outcomes = [asyncio.run(outcome_of(store_dir, run_id)) for run_id in run_ids]
    assert [text.rsplit(" ", 1)[0] for text in outcomes] == ["q-b-1", "q-b-2"]
    assert sorted(Checkout.charges) == ["b-1", "b-1", "b-2", "b-2"]


class Ship(Job[str]):
    NAME: ClassVar[str] = "cli.versioning.ship"
    order: str

    async def run(self, ctx: JobContext) -> str:
        await ctx.step("email", lambda: "sent")
        await ctx.wait_for_event("packed")
        await ctx.wait_for_event("shipped")
        return "shipped"


class ShipChecked(Ship):
    NAME: ClassVar[str] = "cli.versioning.ship"

    async def run(self, ctx: JobContext) -> str:
        if await ctx.patched("fraud-check"):
            await ctx.step("fraud", lambda: "ok")
        await ctx.step("email", lambda: "sent")
        await ctx.wait_for_event("packed")
        await ctx.wait_for_event("shipped")
        return "shipped"


async def waits_for(runner: JobRunner, run_id: str, event: str) -> None:
    async def there() -> bool:
        state = await runner.status(run_id)
        return state is not None and state.waiting_for == event

    await wait_until(there, timeout=DEADLINE)


def test_ls_patch_lists_the_runs_that_may_still_take_the_old_path(
    run_cli: RunCli, store_dir: Path
) -> None:
    store = ["--store", str(store_dir)]

    async def before_the_deploy() -> str:
        async with runner_on(store_dir, Ship) as before:
            old = await before.submit(Ship(order="s-1"))
            await waits_for(before, old.id, "packed")
        return old.id

    async def after_the_deploy() -> str:
        async with runner_on(store_dir, ShipChecked) as after:
            new = await after.submit(ShipChecked(order="s-2"))
            await waits_for(after, new.id, "packed")
        return new.id

    old = asyncio.run(before_the_deploy())
    # No run has met the patch yet: the store cannot say where its point is.
    listed = run_cli("ls", "--patch", "fraud-check", *store)
    assert listed.status == 0, listed.err
    assert (
        "1 run(s) not finished may still take the old path of patch 'fraud-check': "
        "0 took it, 0 went past its point on the old code (they take it when they go on), "
        "0 have not reached it, 1 have not met it, nor has any run of their kind "
        "(before its point or past it, no record says) (0 took the new path)"
    ) in listed.out

    new = asyncio.run(after_the_deploy())
    listed = run_cli("ls", "--patch", "fraud-check", *store)
    assert listed.status == 0, listed.err
    assert old[:12] in listed.out and new[:12] not in listed.out
    # The new run met it first thing: the old one, waiting after its email,
    # went past it on the old code, and takes the old path when it goes on.
    assert (
        "1 run(s) not finished may still take the old path of patch 'fraud-check': "
        "0 took it, 1 went past its point on the old code (they take it when they go on), "
        "0 have not reached it (1 took the new path)"
    ) in listed.out
    as_json = run_cli("ls", "--patch", "fraud-check", "--json", *store).json()
    assert [row["id"] for row in as_json["past"]] == [old]
    assert (as_json["not_yet"], as_json["points"]) == ([], {"cli.versioning.ship": 0})

    async def resume(*events: str) -> None:
        async with runner_on(store_dir, ShipChecked) as after:
            for event in events:
                await after.send_event(old, event)
            if "shipped" in events:
                await after.handle(old, ShipChecked).result(timeout=DEADLINE)
            else:
                await waits_for(after, old, "shipped")

    asyncio.run(resume("packed"))
    as_json = run_cli("ls", "--patch", "fraud-check", "--json", *store).json()
    assert [row["id"] for row in as_json["old"]] == [old]
    assert (as_json["past"], as_json["not_yet"], as_json["new"]) == ([], [], 1)
    asyncio.run(resume("shipped"))
    listed = run_cli("ls", "--patch", "fraud-check", *store)
    assert "0 run(s) not finished may still take the old path" in listed.out
