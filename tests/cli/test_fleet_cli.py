"""The fleet's commands. ``stepstone workers``: one line per worker from the
records the workers keep, live first, and a record that holds hostile text
or values named in a warning, never a traceback or a terminal escape.
``stepstone schedules``: each schedule from its marker, with the run its
last tick started, with no application code."""

from __future__ import annotations

import asyncio
import math
import time
from datetime import timedelta
from pathlib import Path

import worker_records
from cli_app import Greet
from cli_support import Cli

from stepstone import JobRunner, Schedule
from stepstone.ops.schedules import read_schedules
from stepstone.testing import wait_until


def put_record(store: Path, name: str, **changes: object) -> str:
    runs = ["a" * 32, "b" * 32]
    fields: dict[str, object] = dict(host="elsewhere", concurrency=8, held=2, runs=runs)
    return worker_records.put_record(store, name, **{**fields, **changes})


async def test_workers_lists_a_running_worker_and_the_records_of_others(
    store_dir: Path, cli: Cli
) -> None:
    put_record(store_dir, "w-far")
    put_record(store_dir, "w-dead", beat=time.time() - 3600)
    bad = put_record(store_dir, "w-bad\x1b[2J", beat=math.inf)
    async with JobRunner(str(store_dir), worker_id="w-here", concurrency=3):
        await wait_until(lambda: len(list((store_dir / "workers").glob("*/*"))) == 4)
        # In threads: w-here keeps beating while the commands run (it is gone
        # two beats, 10 s, after its last; a loaded machine takes that long).
        listed = await asyncio.to_thread(cli, "workers", "--store", str(store_dir))
        as_json = await asyncio.to_thread(cli, "workers", "--json", "--store", str(store_dir))
    assert listed.status == 0, listed.err
    lines = listed.out.splitlines()
    assert lines[0].split() == ["ID", "STATE", "HOST", "PID", "HELD", "LAST", "SEEN", "RUNS"]
    assert [line.split()[:2] for line in lines[1:4]] == [
        ["w-far", "live"],
        ["w-here", "live"],
        ["w-dead", "gone"],
    ]
    assert "2/8" in lines[1] and "aaaaaaaaaaaa, bbbbbbbbbbbb" in lines[1]
    assert "0/3" in lines[2]
    assert lines[-1] == "2 live, 1 gone, 0 stopped"
    assert "\x1b" not in listed.out + listed.err and "Traceback" not in listed.err
    assert f"cannot read {bad}: id is not a printable name" in listed.err
    workers = {w["id"]: w for w in as_json.json()["workers"]}
    assert workers["w-here"]["state"] == "live" and workers["w-here"]["concurrency"] == 3
    assert as_json.json()["unreadable"][0]["key"] == bad


def test_workers_on_a_store_no_worker_ran_on_says_so(store_dir: Path, cli: Cli) -> None:
    listed = cli("workers", "--store", str(store_dir))
    assert listed.status == 0, listed.err
    assert listed.out == "0 live, 0 gone, 0 stopped\n"


async def test_schedules_shows_a_schedule_from_its_marker_with_the_run_its_tick_started(
    store_dir: Path, cli: Cli
) -> None:
    every_second = Schedule("greet", every=timedelta(seconds=1), job=lambda t: Greet(name="s"))
    runner = JobRunner(str(store_dir), jobs=[Greet], schedules=[every_second], poll_interval=0.05)

    async def a_tick_ran() -> bool:
        rows = (await read_schedules(runner, [])).rows
        return bool(rows) and rows[0].run_state == "succeeded"

    async with runner:
        await wait_until(a_tick_ran, timeout=30)
    (row,) = (await read_schedules(runner, [])).rows
    await runner.close()
    assert row.last_run is not None
    listed = cli("schedules", "--store", str(store_dir))  # no app: from the marker alone
    assert listed.status == 0, listed.err
    header, line = listed.out.splitlines()
    assert header.split() == [
        "NAME",
        "SCHEDULE",
        "MISSED",
        "OVERLAP",
        *["LAST", "TICK", "LAST", "RUN", "NEXT", "TICKS"],
    ]
    assert line.split()[:5] == ["greet", "every", "0:00:01", "latest", "allow_all"]
    assert f"{row.last_run[:12]} succeeded" in line
    (shown,) = cli("schedules", "--json", "--store", str(store_dir)).json()["schedules"]
    assert (shown["last_run"], shown["run_state"], shown["in_app"]) == (
        row.last_run,
        "succeeded",
        False,
    )
