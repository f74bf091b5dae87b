"""``stepstone schedules pause|resume|backfill``: an operator's actions on
a schedule, kept in the store, recorded in the audit log, shown by
``stepstone schedules``; a backfill run twice submits nothing more."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cli_support import Cli, one_line_error

APP = ["--app", "cli_app:make_scheduled_runner"]


def test_pause_and_resume_are_kept_in_the_store_shown_and_audited(
    store_dir: Path, cli: Cli
) -> None:
    env = {"STEPSTONE_STORE": str(store_dir)}
    paused = cli("schedules", "pause", "greet-hourly", "--note", "the db moves", *APP, env=env)
    assert paused.status == 0, paused.err
    assert "paused schedule 'greet-hourly'" in paused.out
    # Without the application: from the marker alone.
    listed = cli("schedules", "--store", str(store_dir))
    assert listed.status == 0, listed.err
    header, line, *notes = listed.out.splitlines()
    assert "OVERLAP" in header.split()
    assert line.split()[0] == "greet-hourly" and line.endswith("(paused)")
    assert len(notes) == 1 and notes[0].startswith("greet-hourly: paused since ")
    assert notes[0].endswith(": the db moves") and "@" in notes[0]  # who: user@host
    (shown,) = cli("schedules", "--json", "--store", str(store_dir)).json()["schedules"]
    assert (shown["paused"], shown["note"], shown["overlap"]) == (True, "the db moves", "allow_all")
    resumed = cli("schedules", "resume", "greet-hourly", "--store", str(store_dir))
    assert resumed.status == 0, resumed.err
    assert "resumed schedule 'greet-hourly'" in resumed.out
    again = cli("schedules", "resume", "greet-hourly", "--store", str(store_dir))
    assert (again.status, again.out.strip()) == (0, "schedule 'greet-hourly' was not paused")
    assert "(paused)" not in cli("schedules", "--store", str(store_dir)).out
    audit = cli("audit", "--json", "--store", str(store_dir)).json()["records"]
    done = {(r["action"], r["outcome"]) for r in audit}
    assert done == {("pause", "done"), ("resume", "done"), ("resume", "refused")}
    (pause,) = [r for r in audit if r["action"] == "pause"]
    assert pause["detail"] == {"schedule": "greet-hourly", "note": "the db moves"}


def test_what_cannot_be_paused_is_one_line_naming_why(store_dir: Path, cli: Cli) -> None:
    env = {"STEPSTONE_STORE": str(store_dir)}
    unknown = cli("schedules", "pause", "nope", "--store", str(store_dir))
    one_line_error(unknown, "no schedule 'nope'", "no worker has carried it")
    hostile = cli("schedules", "pause", "greet-hourly", "--note", "a\x1b[2Jb", *APP, env=env)
    one_line_error(hostile, "printable")
    assert "\x1b" not in hostile.err


def test_backfill_submits_each_tick_once_and_a_second_time_nothing(
    store_dir: Path, cli: Cli
) -> None:
    env = {"STEPSTONE_STORE": str(store_dir)}
    base = (int(time.time()) // 3600 - 5) * 3600  # five hours ago, on the hour
    span = ["--from", _iso(base), "--to", _iso(base + 3 * 3600)]  # four ticks
    first = cli("schedules", "backfill", "greet-hourly", *span, "--json", *APP, env=env)
    assert first.status == 0, first.err
    submitted = first.json()["submitted"]
    assert [s["tick"] for s in submitted] == [_iso(base + 3600 * n) for n in range(4)]
    again = cli("schedules", "backfill", "greet-hourly", *span, *APP, env=env)
    assert again.status == 0, again.err
    assert "submitted 0 tick(s)" in again.out
    queued = cli("ls", "--json", "--store", str(store_dir)).json()
    assert len(queued["runs"]) == len(submitted)
    (record,) = [
        r for r in cli("audit", "--json", "--store", str(store_dir)).json()["records"]
        if r["action"] == "backfill" and r["count"]
    ]  # fmt: skip
    assert sorted(record["runs"]) == sorted(s["run"] for s in submitted)
    bare = cli("schedules", "backfill", "greet-hourly", "--from", "2h", "--store", str(store_dir))
    one_line_error(bare, "not defined by this application")
    ahead = datetime.now(UTC) + timedelta(hours=2)
    late = cli(
        "schedules", "backfill", "greet-hourly", "--from", "1h", "--to", ahead.isoformat(), *APP,
        env=env,
    )  # fmt: skip
    one_line_error(late, "still to come")


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()
