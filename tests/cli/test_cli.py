"""``stepstone`` end to end: real subprocesses on a real directory (and moto S3).

The state each command reads is made by a real JobRunner in the test process
on the same store, so the CLI is checked against what the engine writes.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cli_app import Boom, Gated, Greet, Nap, count
from cli_support import DEADLINE, Cli, Result, file_runner, one_line_error, wait_for

from stepstone import JobFailed, JobRunner, SubmitOptions
from stepstone.cli import main
from stepstone.cli.commands import _Progress
from stepstone.cli.durations import parse_duration
from stepstone.cli.errors import CliError
from stepstone.records.outcome import Tombstone, decode_outcome_key
from stepstone.testing import wait_until

# -- the worker ------------------------------------------------------------------------


async def test_worker_runs_jobs_then_drains_on_sigterm(
    store_dir: Path, cli_dir: Path, cli_env: dict[str, str]
) -> None:
    log_path = cli_dir / "worker.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(  # noqa: ASYNC220 - returns at once
            [
                sys.executable,
                "-m",
                "stepstone",
                "worker",
                "cli_app:make_runner",
                "--concurrency",
                "3",
                "--log-format",
                "json",
            ],
            env={**cli_env, "STEPSTONE_STORE": str(store_dir)},
            stdout=subprocess.DEVNULL,
            stderr=log_file,
        )
    try:
        runner = file_runner(store_dir)  # submits only: no worker in this process
        greet = await runner.submit(Greet(name="ada"))
        assert await greet.result(timeout=DEADLINE) == "hello ada"

        gated = await runner.submit(Gated(n=1))
        wait_for((cli_dir / "started-1").exists, "the gated job to start")
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: "draining" in log_path.read_text(), "the worker to start draining")
        assert proc.poll() is None, "the worker left without waiting for its in-flight job"
        (cli_dir / "release-1").touch()
        assert proc.wait(timeout=DEADLINE) == 0
        outcome = await gated.join(timeout=5)
        assert outcome.ok and outcome.result == 1 and outcome.attempts == 1
        await runner.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    records = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    messages = [r["message"] for r in records]
    assert any("concurrency 3" in m for m in messages), messages
    assert any("drained" in m for m in messages), messages
    about_greet = [r for r in records if r.get("run_id") == greet.id]
    assert about_greet, "no log record carried the job's id"
    for record in about_greet:
        assert record.get("kind") == "cli.greet" and record.get("attempt") == 1, record


def test_worker_refuses_a_bad_target(
    cli: Cli, store_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"STEPSTONE_STORE": str(store_dir)}
    one_line_error(cli("worker", "no_such_module:runner", env=env), "no_such_module")
    # The rest in-process: the same main(), without paying for an interpreter each.
    monkeypatch.setenv("STEPSTONE_STORE", str(store_dir))
    for target, fragment in [
        ("cli_app:nothing_here", "nothing_here"),
        ("cli_app:count", "needs arguments"),
        ("cli_app:DEADLINE_NOTE", "not a JobRunner"),
        ("cli_app", "APP:RUNNER"),
    ]:
        status = main(["worker", target])
        one_line_error(Result(status, "", capsys.readouterr().err), fragment)


# -- inspecting and operating on jobs -----------------------------------------------------


async def test_ls_show_stats_cancel_retry_on_a_file_store(
    cli: Cli, store_dir: Path, cli_dir: Path
) -> None:
    runner = file_runner(store_dir)
    async with runner:
        greet = await runner.submit(Greet(name="bob"))
        assert await greet.result(timeout=DEADLINE) == "hello bob"
        boom = await runner.submit(Boom(n=4))
        with pytest.raises(JobFailed):
            await boom.result(timeout=DEADLINE)
        later = await runner.submit(
            Greet(name="later"), SubmitOptions(run_at=datetime.now(UTC) + timedelta(hours=1))
        )
    assert count("prepare") == 1
    store = ["--store", str(store_dir)]

    # ls: everything, one row per id, and where each row came from.
    listed = cli("ls", "--json", *store)
    assert listed.status == 0, listed.err
    rows = {row["id"]: row for row in listed.json()["runs"]}
    assert set(rows) == {greet.id, boom.id, later.id}
    assert (rows[greet.id]["status"], rows[greet.id]["source"]) == ("succeeded", "outcome")
    assert (rows[boom.id]["status"], rows[boom.id]["source"]) == ("dead", "queue+outcome")
    assert "boom 4" in rows[boom.id]["last_error"]
    assert (rows[later.id]["status"], rows[later.id]["source"]) == ("scheduled", "queue")

    # Options go after the command or before it; the table says what it read.
    table = cli(*store, "ls", "--status", "succeeded")
    assert table.status == 0, table.err
    assert greet.id[:12] in table.out and boom.id[:12] not in table.out
    assert "1 run(s) from outcomes/ (finished runs)" in table.out
    dead = cli("ls", "--status", "dead", "--json", env={"STEPSTONE_STORE": str(store_dir)})
    assert [row["id"] for row in dead.json()["runs"]] == [boom.id]

    # show: outcome, progress and memos by step name.
    shown = cli("show", greet.id, "--json", *store).json()
    assert shown["status"] == "succeeded" and shown["outcome"]["result"] == "hello bob"
    assert shown["progress"] == {"done": 2, "of": 2}
    assert [(m["step"], m["position"], m["current"]) for m in shown["memos"]] == [
        ("lookup", 1, True),
        ("compose", 2, True),
    ]
    assert shown["memos"][0]["value"] == {"who": "bob", "lang": "en"}
    text = cli("show", boom.id, *store)
    assert text.status == 0, text.err
    expected = ["status       dead", "queue:", "outcome:", "error        permanent: "]
    expected += [
        "attempts (1, by claim):",
        "  1  attempt 1   dead",
        "steps (1, in the order they ran",
    ]
    assert re.search(r"^  1  prepare  1 .* 8$", text.out, re.MULTILINE), text.out
    # ... and where the job failed: its traceback, down to the line that raised.
    expected += ["  traceback:", 'raise Permanent(f"boom {self.n}")', "Permanent: boom 4"]
    for fragment in expected:
        assert fragment in text.out, text.out
    failed = cli("show", boom.id, "--json", *store).json()["outcome"]["error"]
    assert failed["traceback"].endswith("Permanent: boom 4"), failed

    # --app: the store (and queue and prefix) of the application's runner.
    stats = cli(
        "stats", "--json", "--app", "cli_app:make_runner", env={"STEPSTONE_STORE": str(store_dir)}
    ).json()
    assert stats["queue"] == {
        "scheduled": 1,
        "ready": 0,
        "running": 0,
        "sleeping": 0,
        "waiting_for_event": 0,
        "waiting_for_callback": 0,
        "waiting_for_children": 0,
        "waiting_for_slot": 0,
        "rate_limited": 0,
        "waiting_for_version": 0,
        "debounced": 0,
        "dead": 1,
    }
    assert stats["outcomes"] == {"succeeded": 1, "failed": 1, "cancelled": 0}

    # cancel: a live job is cancelled once; a finished one is refused.
    assert cli("show", later.id, "--json", *store).json()["input"] == {"name": "later"}
    cancelled = cli("cancel", later.id, *store)
    assert (cancelled.status, cancelled.out.strip()) == (0, f"cancelled {later.id}"), cancelled.err
    assert cli("show", later.id, "--json", *store).json()["status"] == "cancelled"
    one_line_error(cli("cancel", later.id, *store), "already finished (cancelled)")

    # retry: only a dead job; its failed outcome goes first, and the rerun
    # replays the step the failed run recorded.
    one_line_error(cli("retry", greet.id, *store), "only a dead run can be retried")
    (cli_dir / "allow-boom").touch()
    retried = cli("retry", boom.id, *store)
    assert retried.status == 0, retried.err
    assert "failed outcome was removed" in retried.out
    async with file_runner(store_dir) as runner:
        assert await runner.handle(boom.id, Boom).result(timeout=DEADLINE) == 8
    assert count("prepare") == 1, "the retried run executed a step that had a memo"
    assert cli("show", boom.id, "--json", *store).json()["status"] == "succeeded"


async def test_purge_removes_only_runs_older_than_the_age(
    cli: Cli, store_dir: Path, cli_env: dict[str, str]
) -> None:
    async with file_runner(store_dir) as runner:
        handles = [await runner.submit(Greet(name=n)) for n in ("old-1", "old-2", "new")]
        for handle in handles:
            await handle.result(timeout=DEADLINE)
    ten_days_ago = time.time() - 10 * 86400
    for handle in handles[:2]:
        os.utime(store_dir / "outcomes" / handle.id, (ten_days_ago, ten_days_ago))

    store = ["--store", str(store_dir)]
    dry = cli("purge", "--older-than", "7d", "--dry-run", *store)
    assert dry.status == 0, dry.err
    assert sorted(dry.out.split()[:2]) == sorted(h.id for h in handles[:2])
    assert "would purge 2 finished run(s) older than 7d" in dry.out
    assert all((store_dir / "outcomes" / h.id).exists() for h in handles)

    # The console script, not just python -m.
    script = shutil.which("stepstone", path=os.path.dirname(sys.executable))
    assert script is not None, "the stepstone console script is not installed"
    done = subprocess.run(  # noqa: ASYNC221 - nothing else runs in this loop meanwhile
        [script, "purge", "--older-than", "1w", "--json", *store],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(json.loads(done.stdout)["ids"]) == sorted(h.id for h in handles[:2])
    for handle in handles[:2]:
        # The outcome is a tombstone now: no answer, but its swept run's zombies keep out.
        swept = decode_outcome_key((store_dir / "outcomes" / handle.id).read_bytes())
        assert isinstance(swept, Tombstone), swept
        assert not list((store_dir / "progress").glob(f"{handle.id}/*"))
        assert not list((store_dir / "memos").glob(f"{handle.id}/*/*"))
    assert (store_dir / "outcomes" / handles[2].id).exists()
    assert list((store_dir / "memos").glob(f"{handles[2].id}/*/*"))


def test_errors_are_one_line(
    cli: Cli, store_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ["--store", str(store_dir)]
    one_line_error(cli("show", "ab" * 16, *store), "no run " + "ab" * 16)
    one_line_error(cli("ls", "--store", "ftp://host/x"), "unknown scheme")
    # The rest in-process: the same main(), without paying for an interpreter each.
    for argv, fragments in [
        (["show", "not-an-id", *store], ["not a run id"]),
        (["retry", "cd" * 16, *store], ["no run"]),
        (["cancel", "ef" * 16, *store], ["no run"]),
        (["ls"], ["--store", "STEPSTONE_STORE"]),
        (["ls", "--store", str(tmp_path / "typo")], ["does not exist"]),
        (["ls", "--store", "typo"], ["does not exist", "relative to the working directory"]),
        (["ls", "--store", "s3:///no-bucket"], ["no bucket"]),
        (["ls", "--store", "memory://"], ["memory://"]),
        (["purge", "--older-than", "7 days", *store], ["duration"]),
    ]:
        status = main(argv)
        captured = capsys.readouterr()
        assert captured.out == "", argv
        one_line_error(Result(status, captured.out, captured.err), *fragments)
    with pytest.raises(SystemExit) as usage:
        main(["ls", "--status", "snoozing", *store])  # argparse's choices
    assert usage.value.code == 2


def test_ls_says_which_queue_cannot_list(
    store_dir: Path,
    cli_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("STEPSTONE_STORE", str(store_dir))
    app = ["--app", "cli_app:make_sqs_runner"]
    for argv in (["ls", *app], ["ls", "--status", "dead", *app]):
        status = main(argv)
        captured = capsys.readouterr()
        one_line_error(
            Result(status, captured.out, captured.err),
            "cannot list its jobs",
            "SqsQueue('cli-test'",
            "ls succeeded",
        )
    # Finished runs are outcome records, which every backend keeps.
    assert main(["ls", "--status", "succeeded", *app]) == 0
    assert "0 run(s) from outcomes/" in capsys.readouterr().out


def test_durations() -> None:
    assert parse_duration("90") == 90
    assert parse_duration("30m") == 1800
    assert parse_duration("12h") == 43200
    assert parse_duration("7d") == 7 * 86400
    assert parse_duration("1h30m") == 5400
    assert parse_duration("0s") == 0
    for bad in ("", "d", "7 days", "-1d", "1y"):
        with pytest.raises(CliError):
            parse_duration(bad)


# -- S3 (moto): few cases, moto is slow -----------------------------------------------------


@pytest.mark.slow
async def test_s3_show_and_missing_bucket(
    cli: Cli, s3_url: str, moto_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async with JobRunner(s3_url, jobs=[Greet], poll_interval=0.05) as runner:
        handle = await runner.submit(Greet(name="s3"))
        assert await handle.result(timeout=DEADLINE) == "hello s3"
        await runner.close()
    aws = {k: os.environ[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    shown = cli("show", handle.id, "--json", "--store", s3_url, env=aws)
    assert shown.status == 0, shown.err
    found = shown.json()
    assert found["outcome"]["result"] == "hello s3"
    assert {m["step"] for m in found["memos"]} == {"lookup", "compose"}

    # In-process (in a thread: this test's loop is running), to spare moto a second
    # interpreter: the same main(), the same one line.
    missing = f"s3://no-such-bucket-here/x?endpoint_url={moto_server}&region=us-east-1"
    status = await asyncio.to_thread(main, ["ls", "--store", missing])
    captured = capsys.readouterr()
    one_line_error(Result(status, captured.out, captured.err), "no-such-bucket-here")


def test_purge_progress_is_drawn_on_a_terminal_only() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty, pipe = Terminal(), io.StringIO()
    for stream in (tty, pipe):
        progress = _Progress(stream, "purging")
        for done in range(3):
            progress(done, 2)
        progress.close()
    assert tty.getvalue() == "\rpurging 0/2\rpurging 1/2\rpurging 2/2\n"
    assert pipe.getvalue() == ""


async def test_schedules_lists_next_ticks_and_show_says_what_a_run_waits_for(
    store_dir: Path, cli: Cli
) -> None:
    app = ["--app", "cli_app:make_scheduled_runner"]
    env = {"STEPSTONE_STORE": str(store_dir)}
    listed = cli("schedules", "--json", "--count", "2", *app, env=env)
    assert listed.status == 0, listed.err
    by_name = {s["name"]: s for s in listed.json()["schedules"]}
    assert set(by_name) == {"greet-hourly", "greet-mornings"}
    assert by_name["greet-mornings"]["spec"] == "cron 0 9 * * 1-5 (Europe/Paris)"
    assert all(t.endswith(("+01:00", "+02:00")) for t in by_name["greet-mornings"]["next_ticks"])
    assert len(by_name["greet-hourly"]["next_ticks"]) == 2
    assert by_name["greet-hourly"]["last_tick"] is None  # no worker has run it yet
    table = cli("schedules", *app, env=env)
    assert table.status == 0 and "greet-mornings" in table.out and "NEXT TICKS" in table.out
    bare = cli("schedules", "--store", str(store_dir))  # no app, no markers yet
    assert (bare.status, bare.out) == (
        0,
        "no schedules: none has a marker in this store (--app lists the application's)\n",
    )

    submitter = JobRunner(str(store_dir), jobs=[Nap])
    async with JobRunner(str(store_dir), jobs=[Nap], poll_interval=0.05):
        handle = await submitter.submit(Nap())
        await wait_until(lambda: _sleeping(submitter, handle.id), message="the nap starts")
    shown = cli("show", handle.id, "--store", str(store_dir))
    assert shown.status == 0, shown.err
    assert "status       sleeping" in shown.out and "waiting for  until " in shown.out
    assert (
        cli("show", handle.id, "--json", "--store", str(store_dir))
        .json()["queue"]["waiting_for"]
        .startswith("until ")
    )


async def _sleeping(runner: JobRunner, job_id: str) -> bool:
    state = await runner.status(job_id)
    return state is not None and state.status == "sleeping"
