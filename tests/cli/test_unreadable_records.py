"""One record that will not decode never makes ``stepstone`` unusable.

Garbage, a truncated record and a record of a format version this library
does not read, in outcomes, memos, progress and queue records: every command
names each bad record's key in one line and goes on with the rest, and none
prints a traceback. Also: a reader that stops reading (``stepstone show ID |
head``) ends the command quietly.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cli_app import Boom, Greet
from cli_support import DEADLINE, Cli, Result, file_runner, one_line_error

from stepstone import JobFailed, SubmitOptions
from stepstone.records.codec import pack

GARBAGE = b"\x81\xa1v\xff garbage"
OTHER_VERSION = pack({"v": 99, "run_id": "x", "status": "succeeded"})


def warnings(result: Result) -> list[str]:
    """The command's stderr: warnings only, one line each."""
    assert "Traceback" not in result.err, result.err
    lines = result.err.splitlines()
    assert all(line.startswith("stepstone: warning: ") for line in lines), lines
    return lines


def named(lines: list[str], key: str) -> int:
    """How many lines name ``key``."""
    return sum(key in line for line in lines)


async def test_every_command_names_each_unreadable_record_and_goes_on(
    cli: Cli, store_dir: Path, cli_dir: Path
) -> None:
    async with file_runner(store_dir) as runner:
        good, garbled, truncated, foreign = [
            await runner.submit(Greet(name=name)) for name in ("ok", "garbled", "cut", "foreign")
        ]
        for handle in (good, garbled, truncated, foreign):
            await handle.result(timeout=DEADLINE)
        boom = await runner.submit(Boom(n=7))
        with pytest.raises(JobFailed):
            await boom.result(timeout=DEADLINE)
        later = await runner.submit(
            Greet(name="later"), SubmitOptions(run_at=datetime.now(UTC) + timedelta(hours=1))
        )

    def damage(key: str, data: bytes | None = None) -> str:
        path = store_dir / key
        path.write_bytes(data if data is not None else path.read_bytes()[:20])
        return key

    bad_outcomes = {
        damage(f"outcomes/{garbled.id}", GARBAGE),
        damage(f"outcomes/{truncated.id}"),
        damage(f"outcomes/{foreign.id}", OTHER_VERSION),
    }
    dead_outcome = damage(f"outcomes/{boom.id}", GARBAGE)
    live_outcome = damage(f"outcomes/{later.id}", GARBAGE)
    bad_outcomes |= {dead_outcome, live_outcome}
    memo = next((store_dir / "memos" / good.id).glob("*/#00000001"))  # (its step "lookup")
    memo_key = damage(str(memo.relative_to(store_dir)), GARBAGE)
    progress = next((store_dir / "progress" / good.id).glob("*"))  # (one per incarnation)
    progress_key = damage(str(progress.relative_to(store_dir)), GARBAGE)
    stray = "ab" * 16
    (store_dir / "queue" / "jobs" / stray).write_bytes(GARBAGE)
    queue_key = f"queue/jobs/{stray}"
    store = ["--store", str(store_dir)]

    # ls: the readable rows, and one line per unreadable record.
    listed = cli("ls", *store)
    assert listed.status == 0, listed.err
    assert all(h.id[:12] in listed.out for h in (good, boom, later)), listed.out
    lines = warnings(listed)
    assert len(lines) == len(bad_outcomes) + 1, lines
    assert all(named(lines, key) == 1 for key in [*bad_outcomes, queue_key]), lines

    as_json = cli("ls", "--json", *store)
    assert as_json.status == 0, as_json.err
    assert {row["id"] for row in as_json.json()["runs"]} >= {good.id, boom.id, later.id}
    assert {item["key"] for item in as_json.json()["unreadable"]} == {*bad_outcomes, queue_key}

    dead = cli("ls", "--status", "dead", *store)
    assert dead.status == 0 and boom.id[:12] in dead.out, dead
    assert named(warnings(dead), dead_outcome) == 1

    # show: every part that can be read, and each one that cannot, by key.
    shown = cli("show", good.id, *store)
    assert shown.status == 0 and "Traceback" not in shown.err, shown
    assert f"progress     cannot read {progress_key}:" in shown.out
    assert f"<cannot read {memo_key}:" in shown.out
    assert re.search(r"^  \d+  compose .* hello ok$", shown.out, re.MULTILINE), shown.out
    assert "result       hello ok" in shown.out
    for job, key in [(garbled, f"outcomes/{garbled.id}"), (foreign, f"outcomes/{foreign.id}")]:
        shown = cli("show", job.id, *store)
        assert shown.status == 0 and f"outcome: cannot read {key}:" in shown.out, shown
    detail = cli("show", good.id, "--json", *store).json()
    assert {item["key"] for item in detail["unreadable"]} == {progress_key, memo_key}
    stray_shown = cli("show", stray, *store)
    assert stray_shown.status == 0 and f"queue: cannot read {queue_key}:" in stray_shown.out

    # stats: the counts of what could be read, and the rest named.
    stats = cli("stats", "--json", *store)
    assert stats.status == 0, stats.err
    assert stats.json()["outcomes"]["succeeded"] == 1
    assert {item["key"] for item in stats.json()["unreadable"]} == bad_outcomes

    # cancel: a live job whose outcome cannot be read is refused, by key.
    one_line_error(cli("cancel", later.id, *store), live_outcome, "cannot be read")

    # retry: a dead job's unreadable outcome is removed (named) and the job runs again.
    (cli_dir / "allow-boom").touch()
    retried = cli("retry", boom.id, *store)
    assert retried.status == 0, retried.err
    assert named(warnings(retried), dead_outcome) == 1
    async with file_runner(store_dir) as runner:
        assert await runner.handle(boom.id, Boom).result(timeout=DEADLINE) == 14


@pytest.mark.parametrize("command", ["show", "ls"])
async def test_a_reader_that_stops_reading_ends_the_command_quietly(
    command: str, store_dir: Path, cli_env: dict[str, str]
) -> None:
    async with file_runner(store_dir) as runner:
        handle = await runner.submit(Greet(name="piped"))
        await handle.result(timeout=DEADLINE)
    # A pipe whose reader is gone before the command writes: `| head` after its lines.
    read_end, write_end = os.pipe()
    os.close(read_end)
    args = ["show", handle.id] if command == "show" else ["ls"]
    try:
        done = subprocess.run(  # noqa: ASYNC221 - the command under test, to completion
            [sys.executable, "-m", "stepstone", *args, "--store", str(store_dir)],
            env=cli_env,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=DEADLINE,
        )
    finally:
        os.close(write_end)
    assert done.stderr == ""
    assert done.returncode == 141  # 128 + SIGPIPE, as a Unix tool killed by the closed pipe
