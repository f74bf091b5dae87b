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
from cli_support import DEADLINE, Result

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
        app = create_app(runner, refresh=0)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ui") as client:
            page = await client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    text = html.unescape(page.text)
    assert DIVERGED in text and "NonDeterministicReplay" in text
