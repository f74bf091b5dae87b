"""``stepstone ls`` and ``show`` of a debounced run: listed as debounced
(and by ``--status debounced``), shown with its key's window as it stands
(until when, after how many submits, the last submit's input), its key's
text escaped; and of a run skipped because its singleton key's run was
live: cancelled, naming that run."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from cli_app import Greet
from cli_support import DEADLINE, Cli, file_runner

from stepstone import Debounce, Job, JobContext, JobRunner, JobStatus, Singleton, SubmitOptions
from stepstone.testing import wait_until

HOSTILE_KEY = "doc-\x1b[31m7"


async def test_ls_and_show_say_a_run_is_debounced_until_when(
    cli: Cli, store_dir: Path, cli_dir: Path
) -> None:
    runner = file_runner(store_dir)
    options = SubmitOptions(debounce=Debounce(HOSTILE_KEY, wait=600))
    async with runner:
        handles = [await runner.submit(Greet(name=n), options) for n in ("a", "b", "c")]
        run = handles[0].id
        assert {h.id for h in handles} == {run}

        async def debounced() -> bool:
            state = await runner.status(run)
            return state is not None and state.status is JobStatus.DEBOUNCED

        await wait_until(debounced, timeout=DEADLINE)
    store = ["--store", str(store_dir)]

    listed = cli("ls", "--json", *store)
    assert listed.status == 0, listed.err
    assert [(r["id"], r["status"]) for r in listed.json()["runs"]] == [(run, "debounced")]
    only = cli("ls", "--status", "debounced", *store)
    assert only.status == 0 and run[:12] in only.out and "debounced" in only.out

    shown = cli("show", run, *store)
    assert shown.status == 0, shown.err
    assert "\x1b" not in shown.out, "the key's text drove the terminal"
    debounced_line = next(
        line for line in shown.out.splitlines() if line.split()[:1] == ["debounced"]
    )
    assert "until" in debounced_line and "3 submits" in debounced_line
    assert "doc-\\x1b[31m7" in shown.out  # the key, escaped
    assert '{"name": "c"}' in shown.out  # the input it will run: the last submit's
    as_json = cli("show", run, "--json", *store).json()
    window = as_json["queue"]["debounce"]["window"]
    assert window["submits"] == 3 and not window["closed"]
    assert as_json["queue"]["debounce"]["key"] == HOSTILE_KEY
    assert as_json["input"] == {"name": "c"}


class Nightly(Job[str]):
    """A singleton per report that sleeps long: live while the test looks."""

    NAME: ClassVar[str] = "cli.nightly"
    singleton: ClassVar[Singleton] = Singleton.SKIP_NEWEST
    report: str

    def concurrency_key(self) -> str:
        return self.report

    async def run(self, ctx: JobContext) -> str:
        await ctx.sleep(600)
        return "done"


async def test_ls_and_show_say_a_run_was_skipped_for_the_live_one(
    cli: Cli, store_dir: Path
) -> None:
    runner = JobRunner(str(store_dir), jobs=[Nightly], poll_interval=0.05)
    async with runner:
        live = await runner.submit(Nightly(report="sales"))
        skipped = await runner.submit(Nightly(report="sales"))
        assert (await skipped.join(timeout=DEADLINE)).status is JobStatus.CANCELLED
    store = ["--store", str(store_dir)]
    listed = cli("ls", "--json", *store).json()["runs"]
    row = next(r for r in listed if r["id"] == skipped.id)
    assert row["status"] == "cancelled"
    assert row["last_error"] == f"skipped: run {live.id} of its singleton key 'sales' was live"
    shown = cli("show", skipped.id, *store)
    assert shown.status == 0, shown.err
    assert f"skipped: run {live.id}" in shown.out
