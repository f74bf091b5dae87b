"""``stepstone audit``, and the records ``retry``, ``cancel``, ``replay`` and
``purge`` leave: each names the operating system's user at this host, the
action, its runs and how it ended; the list filters by run, key, age, user
and action, prints what others wrote with its control characters escaped,
and an action whose record the store refuses is not done.

Runs are made by real JobRunners on a real directory; the commands run
in-process through ``main`` (``--yes`` where a bulk action asks)."""

from __future__ import annotations

import asyncio
import getpass
import json
import socket
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_app import Greet, Report
from cli_support import DEADLINE, Result, file_runner, one_line_error

from stepstone import JobFailed, JobRunner
from stepstone.cli import main
from stepstone.ops.audited import audited, done
from stepstone.records.audit import Actor

ME = f"{getpass.getuser()}@{socket.gethostname()}"


RunCli = Callable[..., Result]


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> RunCli:
    def run(*argv: str) -> Result:
        status = main(list(argv))
        captured = capsys.readouterr()
        return Result(status, captured.out, captured.err)

    return run


def made(store_dir: Path) -> tuple[str, str, str]:
    """A dead run (key report:eu), a succeeded one and a queued one nothing runs."""

    async def go() -> tuple[str, str, str]:
        async with file_runner(store_dir) as runner:
            ran = await runner.submit(Greet(name="ran"))
            await ran.result(timeout=DEADLINE)
            dead = await runner.submit(Report(key="report:eu", message="no"))
            with pytest.raises(JobFailed):
                await dead.result(timeout=DEADLINE)
        idle = JobRunner(str(store_dir), jobs=[Greet])
        try:
            queued = await idle.submit(Greet(name="queued"))
        finally:
            await idle.close()
        return dead.id, ran.id, queued.id

    return asyncio.run(go())


def test_each_action_of_the_cli_is_recorded_and_listed(
    run_cli: RunCli, store_dir: Path, cli_dir: Path
) -> None:
    dead, ran, queued = made(store_dir)
    store = ["--store", str(store_dir)]
    assert run_cli("retry", dead[:10], *store).status == 0
    one_line_error(run_cli("retry", queued, *store), "only a dead run can be retried")
    bulk = ("--kind", "cli.greet", "--status", "ready", "--yes")
    assert run_cli("cancel", *bulk, *store).status == 0
    assert run_cli("replay", ran, "--from-step", "compose", *store).status == 0
    assert run_cli("purge", "--older-than", "30d", "--dry-run", *store).status == 0  # not recorded
    assert run_cli("purge", "--older-than", "30d", *store).status == 0

    listed = run_cli("audit", "--json", *store)
    assert listed.status == 0, listed.err
    records = listed.json()["records"]
    assert [(r["action"], r["outcome"]) for r in records] == [
        ("purge", "done"),
        ("replay", "done"),
        ("cancel", "done"),
        ("retry", "refused"),
        ("retry", "done"),
    ]
    assert {(r["who"], r["via"], r["sign_in"], r["address"]) for r in records} == {
        (ME, "cli", "os", None)
    }
    purge, replay, cancel, refused, retry = records
    assert retry["runs"] == [dead] and retry["result"] == "requeued"
    assert refused["runs"] == [queued] and "only a dead run can be retried" in refused["result"]
    assert replay["runs"] == [ran] and replay["detail"] == {"from_step": "compose"}
    assert purge["detail"] == {"older_than": "30d"} and purge["count"] == 0
    assert cancel["runs"] == [queued] and cancel["result"] == "cancelled 1 of 1 run(s)"
    assert cancel["detail"] == {"chose": "ready run(s) of kind cli.greet"}
    assert all(r["ended"] >= r["at"] for r in records)

    def ids(*options: str) -> list[str]:
        found = run_cli("audit", "--json", *store, *options)
        assert found.status == 0, found.err
        return [r["id"] for r in found.json()["records"]]

    assert ids("--run", dead[:10]) == [retry["id"]]
    assert ids("--key", "report:eu") == [retry["id"]]
    assert ids("--run", queued) == [cancel["id"], refused["id"]]
    assert ids("--action", "retry") == [refused["id"], retry["id"]]
    assert ids("--user", getpass.getuser()) == ids("--user", ME) == ids()
    assert ids("--user", "somebody-else") == []
    assert ids("--since", "1h") == ids() and ids("--since", "2099-01-01") == []
    assert ids("--limit", "2") == [purge["id"], replay["id"]]
    assert ids("--run", queued, "--action", "cancel") == [cancel["id"]]

    table = run_cli("audit", *store)
    header, *rows, total = table.out.splitlines()
    assert header.split() == ["WHEN", "WHO", "VIA", "FROM", "ACTION", "RUNS", "OUTCOME", "RESULT"]
    assert len(rows) == 5 and total == "5 action(s), newest first"
    assert rows[-1].split()[2:8] == [ME, "cli", "-", "retry", dead[:12], "done"]
    one_line_error(run_cli("audit", "--run", "a", "--key", "b", *store), "--run or --key")
    one_line_error(run_cli("audit", "--since", "last week", *store), "10m, 2h, 3d")


def test_what_others_wrote_is_escaped_and_a_bad_record_named(
    run_cli: RunCli, store_dir: Path
) -> None:
    """An event's name is whatever the sender typed: the table shows its
    control characters as escapes; a record that is no record is named, in
    one warning, and the others are listed."""

    async def go() -> None:
        runner = JobRunner(str(store_dir))
        web = Actor("mallory", "web", "proxy", "viewer", "198.51.100.9")
        try:
            await audited(
                runner,
                web,
                "event",
                ["c" * 32],
                _nothing,
                done("sent event '\x1b[2Japproval' \u202eto run"),
                detail={"event": "\x1b[2Japproval"},
            )
            await runner.store.put("audit/2026-01-31/120000.000000-0badf00d", b"\x1b[31m{")
        finally:
            await runner.close()

    asyncio.run(go())
    shown = run_cli("audit", "--store", str(store_dir))
    assert shown.status == 0
    assert "\\x1b[2Japproval" in shown.out and "\\u202e" in shown.out
    assert not [c for c in shown.out if c != "\n" and unicodedata.category(c) in ("Cc", "Cf")]
    assert "mallory" in shown.out and "198.51.100.9" in shown.out
    [warning] = shown.err.splitlines()
    assert warning.startswith("stepstone: warning: cannot read audit/2026-01-31/120000.000000")
    assert "\x1b" not in shown.err
    as_json = json.loads(run_cli("audit", "--json", "--store", str(store_dir)).out)
    assert as_json["records"][0]["detail"] == {"event": "\x1b[2Japproval"}  # JSON: as it is
    assert [bad["key"] for bad in as_json["unreadable"]] == [
        "audit/2026-01-31/120000.000000-0badf00d"
    ]


async def _nothing() -> None:
    return None


def test_an_action_whose_record_the_store_refuses_is_not_done(
    run_cli: RunCli, store_dir: Path, cli_dir: Path
) -> None:
    dead, _, queued = made(store_dir)
    (store_dir / "audit").write_text("not a folder")  # so no record can be put under it
    store = ["--store", str(store_dir)]
    for command in (("retry", dead), ("cancel", queued)):
        refused = run_cli(*command, *store)
        one_line_error(refused, "nothing was done: its audit record could not be written")
    shown = run_cli("ls", "--json", *store).json()["runs"]
    assert {row["id"]: row["status"] for row in shown}[dead] == "dead"
    assert {row["id"]: row["status"] for row in shown}[queued] == "ready"
