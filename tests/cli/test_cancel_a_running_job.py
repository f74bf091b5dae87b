"""``stepstone cancel`` on a job a ``stepstone worker`` process is running.

The worker is another process with the default lease (60 s, so a heartbeat
every 20 s): it learns of the cancel at its next cancellation check (one read
of the run's outcome a second), stops the job, and logs that it was
cancelled; the job's handle raises JobCancelled.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_app import Gated, Greet
from cli_support import DEADLINE, Cli, file_runner, wait_for, worker_process

from stepstone import JobCancelled
from stepstone.ops.reads import list_memos
from stepstone.records.calls import PositionedMemo

WORKER = [sys.executable, "-m", "stepstone", "worker", "cli_app:make_runner"]
STOPPED_WITHIN = 10.0
"""Half the worker's heartbeat: a stop this soon was not the heartbeat's doing."""


async def test_a_running_job_cancelled_from_the_cli_stops_and_the_log_says_cancelled(
    cli: Cli, store_dir: Path, cli_dir: Path, cli_env: dict[str, str]
) -> None:
    log_path = cli_dir / "worker.log"

    def about(job_id: str) -> list[dict[str, Any]]:
        records = [json.loads(line) for line in log_path.read_text().splitlines()]
        return [r for r in records if r.get("run_id") == job_id]

    env = {**cli_env, "STEPSTONE_STORE": str(store_dir)}
    with (
        log_path.open("w") as log_file,
        worker_process([*WORKER, "--log-format", "json"], env, log_file),
    ):
        runner = file_runner(store_dir)  # submits only: the worker process runs the job
        handle = await runner.submit(Gated(n=7))
        wait_for((cli_dir / "started-7").exists, "the job to start in the worker")
        cancelled = cli("cancel", handle.id, "--store", str(store_dir))
        assert cancelled.status == 0, cancelled.err
        wait_for(
            lambda: any("cancelled while running" in r["message"] for r in about(handle.id)),
            "the worker to stop the job",
            timeout=STOPPED_WITHIN,
        )
        with pytest.raises(JobCancelled):
            await handle.result(timeout=DEADLINE)
        await runner.close()
    messages = [r["message"] for r in about(handle.id)]
    assert not any("lease lost" in m for m in messages), messages
    assert not (cli_dir / "release-7").exists()


async def test_a_worker_given_a_build_id_records_it_with_each_call(
    store_dir: Path, cli_env: dict[str, str]
) -> None:
    env = {**cli_env, "STEPSTONE_STORE": str(store_dir)}
    with worker_process([*WORKER, "--build-id", "release-7"], env):
        runner = file_runner(store_dir)  # submits only: the worker process runs the job
        handle = await runner.submit(Greet(name="ann"))
        await handle.result(timeout=DEADLINE)
        memos = [m for m in await list_memos(runner, handle.id) if m.position is not None]
        recorded = [
            PositionedMemo.decode((await runner.store.get(memo.key)).data) for memo in memos
        ]
        await runner.close()
    assert [memo.by for memo in recorded] == ["release-7", "release-7"]
