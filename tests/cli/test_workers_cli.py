"""``stepstone workers``: one line per worker from the records the workers
keep, live first, and a record that holds hostile text or values named in a
warning, never a traceback or a terminal escape."""

from __future__ import annotations

import math
import time
from pathlib import Path

import worker_records
from cli_support import Cli

from stepstone import JobRunner
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
        # (A beat of its own: the CLI below holds this process's event loop.)
        await wait_until(lambda: len(list((store_dir / "workers").glob("*/*"))) == 4)
        listed = cli("workers", "--store", str(store_dir))
        as_json = cli("workers", "--json", "--store", str(store_dir))
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
