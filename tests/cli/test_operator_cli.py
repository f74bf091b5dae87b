"""The operator's commands on a store with runs submitted at known times:
``ls`` newest first with ``--since``, ``--kind`` and ``--limit`` in 100
columns, ``show`` by id prefix or idempotency key, bulk ``retry --status
dead`` with its confirmation, and the shared options before or after every
command.

The runs are made by real JobRunners on a real directory; the queued ones
are submitted by a runner whose clock is set hours or days back (its worker
never started, so they stay queued), which is how their ages are known
without waiting. The CLI runs in-process through ``main`` (one subprocess
where a terminal, or its absence, is the subject).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cli_app import Boom, Greet, Report
from cli_support import DEADLINE, Cli, Result, file_runner, one_line_error

from stepstone import Job, JobFailed, JobRunner
from stepstone.cli import main
from stepstone.cli.durations import parse_since
from stepstone.cli.errors import CliError
from stepstone.ops.actions import retry_many
from stepstone.runtime.clock import FakeClock

HOUR = 3600.0
LONG_ERROR = "\x1b[2Jquota exceeded for region eu-west-1; " + "details " * 20


@dataclass
class Store:
    """The store, and its runs from newest to oldest submitted."""

    path: Path
    dead: str  # a Report whose error is long and holds an escape sequence
    ran: str  # a Greet that succeeded
    mid: str  # a Greet queued two hours ago
    old: str  # a Greet queued three days ago

    @property
    def args(self) -> list[str]:
        return ["--store", str(self.path)]


RunCli = Callable[..., Result]


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> RunCli:
    """``stepstone ARGS`` in this process: status, stdout, stderr."""

    def run(*argv: str) -> Result:
        status = main(list(argv))
        captured = capsys.readouterr()
        return Result(status, captured.out, captured.err)

    return run


def submit_at(path: Path, when: float, *jobs: Job[object]) -> list[str]:
    """Submit ``jobs`` as a runner whose clock reads ``when``; none of them runs."""

    async def go() -> list[str]:
        runner = JobRunner(str(path), jobs=[Greet, Report], clock=FakeClock(when))
        try:
            return [(await runner.submit(job)).id for job in jobs]
        finally:
            await runner.close()

    return asyncio.run(go())


@pytest.fixture
def store(store_dir: Path, cli_dir: Path) -> Store:
    async def finished() -> tuple[str, str]:
        async with file_runner(store_dir) as runner:
            ran = await runner.submit(Greet(name="ran"))
            await ran.result(timeout=DEADLINE)
            dead = await runner.submit(Report(key="report:eu", message=LONG_ERROR))
            with pytest.raises(JobFailed):
                await dead.result(timeout=DEADLINE)
            return ran.id, dead.id

    ran, dead = asyncio.run(finished())
    now = time.time()
    [mid] = submit_at(store_dir, now - 2 * HOUR, Greet(name="mid"))
    [old] = submit_at(store_dir, now - 72 * HOUR, Greet(name="old"))
    return Store(store_dir, dead=dead, ran=ran, mid=mid, old=old)


def listed(run_cli: RunCli, store: Store, *options: str) -> list[str]:
    result = run_cli("ls", "--json", *store.args, *options)
    assert result.status == 0, result.err
    return [row["id"] for row in result.json()["runs"]]


def test_ls_lists_newest_first_and_filters(run_cli: RunCli, store: Store) -> None:
    everything = [store.dead, store.ran, store.mid, store.old]
    assert listed(run_cli, store) == everything
    assert listed(run_cli, store, "--since", "1h") == [store.dead, store.ran]
    yesterday = datetime.fromtimestamp(time.time() - 24 * HOUR, UTC).isoformat()
    assert listed(run_cli, store, "--since", yesterday) == everything[:3]
    assert listed(run_cli, store, "--kind", "cli.greet") == [store.ran, store.mid, store.old]
    assert listed(run_cli, store, "--kind", "cli.greet", "--since", "3h") == [store.ran, store.mid]
    # The newest N, whether they come from outcomes/ or the queue.
    assert listed(run_cli, store, "--limit", "1") == [store.dead]
    assert listed(run_cli, store, "--limit", "3") == everything[:3]
    assert listed(run_cli, store, "--status", "ready") == [store.mid, store.old]
    assert listed(run_cli, store, "--status", "succeeded", "--since", "1h") == [store.ran]

    shown = run_cli("ls", *store.args, "--limit", "3")
    assert shown.out.splitlines()[-1] == (
        "3 run(s) from the queue and outcomes/, newest first (--limit reached)"
    )
    one_line_error(run_cli("ls", *store.args, "--since", "last tuesday"), "10m, 2h, 3d")


def test_ls_fits_100_columns_with_long_names_and_errors_escaped(
    run_cli: RunCli, store: Store
) -> None:
    shown = run_cli("ls", *store.args)
    assert shown.status == 0, shown.err
    lines = shown.out.splitlines()
    assert all(len(line) <= 100 for line in lines), "\n".join(lines)
    header, dead, ran, mid, old = lines[:5]
    assert header.split() == ["ID", "STATUS", "KIND", "TRIES", "AGE", "LAST", "ERROR"]
    assert dead.startswith(store.dead[:12] + "  dead")
    assert "cli.reports.quarterly-r…" in dead, "a long job name is cut with an ellipsis"
    assert "Permanent: \\x1b[2Jquota" in dead, "control characters are escaped"
    assert dead.endswith("…") and len(dead) == 100, "the last error has the room that is left"
    assert not [c for c in shown.out if c != "\n" and unicodedata.category(c) == "Cc"]
    assert ran.split()[:5] == [store.ran[:12], "succeeded", "cli.greet", "1", ran.split()[4]]
    assert mid.split()[4] == "2h" and old.split()[4] == "3d"


def test_show_takes_an_id_prefix_or_an_idempotency_key(run_cli: RunCli, store: Store) -> None:
    by_prefix = run_cli("show", store.dead[:12], "--json", *store.args)
    assert by_prefix.status == 0, by_prefix.err
    assert by_prefix.json()["id"] == store.dead
    by_key = run_cli("show", "--key", "report:eu", "--json", *store.args)
    assert by_key.json()["id"] == store.dead
    assert run_cli("show", store.old[:6], *store.args).out.startswith(f"run {store.old}\n")

    # Two runs whose ids start alike: keys whose SHA-256 (the run id) share four digits.
    first, second = twins(4)
    a, b = submit_at(store.path, time.time(), Report(key=first), Report(key=second))
    ambiguous = run_cli("show", a[:4], *store.args)
    one_line_error(ambiguous, "more than one run", a[:12], b[:12], "give more of the id")
    assert run_cli("show", a[:12], "--json", *store.args).json()["id"] == a

    taken = {i[:4] for i in (store.dead, store.ran, store.mid, store.old, a, b)}
    absent = next(p for p in (f"{n:04x}" for n in range(1 << 16)) if p not in taken)
    one_line_error(run_cli("show", absent, *store.args), f"no run id starts with {absent}")
    one_line_error(run_cli("show", "--key", "report:us", *store.args), "'report:us'", "no run")
    one_line_error(run_cli("show", *store.args), "--key IDEMPOTENCY_KEY")
    one_line_error(run_cli("show", "xyz", *store.args), "not a run id or id prefix")


def twins(digits: int) -> tuple[str, str]:
    """Two idempotency keys whose run ids start with the same ``digits`` hex digits."""
    seen: dict[str, str] = {}
    for n in range(1 << 20):
        key = f"twin-{n}"
        start = hashlib.sha256(key.encode()).hexdigest()[:digits]
        if start in seen:
            return seen[start], key
        seen[start] = key
    raise AssertionError("no two keys share a prefix")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_retry_dead_counts_confirms_and_retries_each(
    cli: Cli, store_dir: Path, cli_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with file_runner(store_dir) as runner:
        booms = [await runner.submit(Boom(n=n)) for n in (1, 2)]
        report = await runner.submit(Report(key="r", message="no"))
        for handle in (*booms, report):
            with pytest.raises(JobFailed):
                await handle.result(timeout=DEADLINE)
    store = ["--store", str(store_dir)]

    # No terminal (a subprocess with stdin from /dev/null): the count, then a refusal.
    refused = cli("retry", "--status", "dead", *store)
    assert refused.out == "3 dead run(s) match\n"
    one_line_error(refused, "stdin is not a terminal", "--yes")

    # On a terminal: the question, and nothing but yes goes ahead.
    def answer(text: str, *argv: str) -> int:
        monkeypatch.setattr("sys.stdin", Terminal(text))
        return main(["retry", "--status", "dead", *argv, *store])

    assert await asyncio.to_thread(answer, "n\n", "--kind", "cli.boom") == 1
    (cli_dir / "allow-boom").touch()
    assert await asyncio.to_thread(answer, "y\n", "--kind", "cli.boom") == 0
    async with file_runner(store_dir) as runner:
        for n, handle in enumerate(booms, 1):
            assert await runner.handle(handle.id, Boom).result(timeout=DEADLINE) == 2 * n

    # --yes, and the report for scripts; the report's run is the one left.
    done = cli("retry", "--status", "dead", "--since", "1h", "--yes", "--json", *store)
    assert done.status == 0, done.err
    assert done.json() == {
        "matched": 1,
        "requeued": [report.id],
        "refused": [],
        "unreadable": [],
    }
    assert "1 dead run(s) submitted since 1h match" in done.err


async def test_a_run_that_cannot_be_retried_is_named_and_the_rest_go_on(
    store_dir: Path, cli_dir: Path
) -> None:
    async with file_runner(store_dir) as runner:
        boom = await runner.submit(Boom(n=3))
        with pytest.raises(JobFailed):
            await boom.result(timeout=DEADLINE)
        greet = await runner.submit(Greet(name="fine"))
        await greet.result(timeout=DEADLINE)
        done = await retry_many(runner, [greet.id, boom.id])
    assert done.done == [boom.id]
    assert list(done.refused) == [greet.id]
    assert "only a dead run can be retried" in done.refused[greet.id]


def test_shared_options_go_before_or_after_every_command(
    run_cli: RunCli, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = str(store.path)
    for command in (["ls"], ["stats"], ["show", store.ran[:8]]):
        before = run_cli("--store", s, "--json", *command)
        after = run_cli(*command, "--json", "--store", s)
        assert before.status == after.status == 0, (before.err, after.err)
        assert before.json() == after.json(), command
    for first, second in ((["--store", s], ["retry"]), (["retry"], ["--store", s])):
        one_line_error(run_cli(*first, *second, "--status", "dead"), "stdin is not a terminal")

    monkeypatch.setenv("STEPSTONE_STORE", s)
    app = ["--app", "cli_app:make_scheduled_runner"]
    assert run_cli(*app, "schedules").status == 0
    assert run_cli("schedules", *app).status == 0
    for argv in (["--app", "cli_app:nowhere", "worker"], ["worker", "--app", "cli_app:nowhere"]):
        one_line_error(run_cli(*argv), "has no attribute 'nowhere'")
    for argv in (["--store", s, "worker", "cli_app:runner"], ["worker", "x:y", "--prefix", "p"]):
        one_line_error(run_cli(*argv), "does not apply")
    # ui: the store option reaches the command in either place (a memory:// store is refused).
    for argv in (["--store", "memory://", "ui"], ["ui", "--store", "memory://"]):
        one_line_error(run_cli(*argv, "--port", "0"), "memory://")


def test_since_reads_a_duration_or_a_time() -> None:
    now = 1_800_000_000.0
    assert parse_since("10m", now) == now - 600
    assert parse_since("3d", now) == now - 3 * 86400
    assert parse_since("2026-01-31", now) == datetime(2026, 1, 31, tzinfo=UTC).timestamp()
    assert (
        parse_since("2026-01-31T12:00+01:00", now)
        == datetime(2026, 1, 31, 11, tzinfo=UTC).timestamp()
    )
    with pytest.raises(CliError):
        parse_since("yesterday", now)


def test_every_command_on_one_run_takes_the_start_of_its_id(store: Store, run_cli: RunCli) -> None:
    """The 12 digits ``ls`` prints are enough for retry and cancel, as for show."""
    one_line_error(run_cli("retry", store.ran[:12], *store.args), "only a dead run can be retried")
    cancelled = run_cli("cancel", store.mid[:12], *store.args)
    assert cancelled.status == 0, cancelled.err
    assert cancelled.out == f"cancelled {store.mid}\n"
    assert run_cli("show", store.mid[:8], "--json", *store.args).json()["status"] == "cancelled"


def test_bulk_cancel_takes_the_live_runs_the_filters_choose(store: Store, run_cli: RunCli) -> None:
    """``cancel --kind K --since T --yes`` cancels each live run it matches and
    leaves the rest: the dead run (not live), the finished one, the older one."""
    done = run_cli("cancel", "--kind", "cli.greet", "--since", "1d", "--yes", *store.args)
    assert done.status == 0, done.err
    assert done.out.splitlines() == [
        "1 run(s) of kind cli.greet submitted since 1d match",
        "cancelled 1 of 1 run(s) of kind cli.greet submitted since 1d",
    ]
    listed = {
        row["id"]: row["status"] for row in run_cli("ls", "--json", *store.args).json()["runs"]
    }
    assert listed == {
        store.mid: "cancelled",
        store.old: "ready",
        store.ran: "succeeded",
        store.dead: "dead",
    }
    # Without a terminal and without --yes, nothing is done.
    refused = run_cli("cancel", "--kind", "cli.greet", *store.args)
    one_line_error(refused, "stdin is not a terminal", "--yes")


def test_runs_are_chosen_by_version_and_by_key_prefix(store_dir: Path, run_cli: RunCli) -> None:
    """Each run records its job type's VERSION and its idempotency key: ``ls``
    and the bulk actions choose by them, and ``show`` says both."""

    class Old(Report):
        VERSION = "2026-11"

    class New(Report):
        VERSION = "2026-12"

    async def submit() -> list[str]:
        runner = JobRunner(str(store_dir), jobs=[Report])  # no worker: they stay queued
        try:
            return [
                (await runner.submit(job)).id
                for job in (Old(key="eu:1"), Old(key="us:1"), New(key="eu:2"))
            ]
        finally:
            await runner.close()

    old_eu, old_us, new_eu = asyncio.run(submit())
    args = ["--store", str(store_dir), "--json"]

    def listed(*filters: str) -> set[str]:
        return {row["id"] for row in run_cli("ls", *filters, *args).json()["runs"]}

    assert listed("--version", "2026-11") == {old_eu, old_us}
    assert listed("--key-prefix", "eu:") == {old_eu, new_eu}
    assert listed("--version", "2026-11", "--key-prefix", "eu:") == {old_eu}
    table = run_cli("ls", "--store", str(store_dir))
    assert table.out.splitlines()[0].split()[:4] == ["ID", "STATUS", "KIND", "VERSION"]
    assert {line.split()[3] for line in table.out.splitlines()[1:4]} == {"2026-11", "2026-12"}
    shown = run_cli("show", old_us, *args).json()
    assert (shown["version"], shown["key"]) == ("2026-11", "us:1")
    done = run_cli("cancel", "--version", "2026-11", "--yes", *args)
    assert done.status == 0, done.err
    assert sorted(done.json()["cancelled"]) == sorted([old_eu, old_us])
    assert listed("--status", "ready") == {new_eu}


def test_a_bulk_action_that_could_not_do_some_exits_with_its_own_status_and_says_which(
    store: Store, run_cli: RunCli
) -> None:
    """A queue record that does not decode is a run a bulk action cannot
    touch: the others are done, the command says how many it could not, and
    exits 3, neither 0 (all done) nor 1 (failed, nothing done), so a script
    sees the job was partial."""
    (store.path / "queue" / "jobs" / ("ef" * 16)).write_bytes(b"\x93 not a record")
    done = run_cli("cancel", "--kind", "cli.greet", "--yes", *store.args)
    assert done.status == 3, done.out
    assert "cancelled 2 of 2 run(s) of kind cli.greet" in done.out
    assert "1 record(s) could not be read, so their runs were not touched" in done.out
    assert "cannot read queue/jobs/" + "ef" * 16 in done.err
