"""Idempotency and awaiting across real processes on one FileStore.

Each child process builds its own JobRunner on the same directory, as
separate API servers and workers would on one bucket.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
from pathlib import Path

import pytest
from wf_jobs import Adder, Pid

from stepstone import JobRunner

pytestmark = pytest.mark.slow

SPAWN = mp.get_context("spawn")


def _submit_many(
    root: str, key: str, n: int, start: mp.synchronize.Event
) -> list[tuple[str, bool]]:
    async def main() -> list[tuple[str, bool]]:
        runner = JobRunner(root, jobs=[Pid])
        start.wait()
        handles = await asyncio.gather(*(runner.submit(Pid(key=key)) for _ in range(n)))
        return [(h.id, h.newly_submitted) for h in handles]

    return asyncio.run(main())


def _submitter(root: str, key: str, n: int, start: mp.synchronize.Event, out: mp.Queue) -> None:
    out.put(_submit_many(root, key, n, start))


def _awaiter(root: str, job_id: str, out: mp.Queue) -> None:
    async def main() -> int:
        runner = JobRunner(root)  # no worker here: it polls the outcome record
        return await runner.handle(job_id, Adder).result(timeout=30)

    out.put(asyncio.run(main()))


async def test_100_concurrent_submits_of_one_key_from_4_processes_make_one_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path / "store")
    os.mkdir(root)
    log = tmp_path / "executions.log"
    monkeypatch.setenv("STEPSTONE_TEST_LOG", str(log))
    start = SPAWN.Event()
    out: mp.Queue = SPAWN.Queue()
    procs = [
        SPAWN.Process(target=_submitter, args=(root, "storm", 25, start, out)) for _ in range(4)
    ]
    for p in procs:
        p.start()
    start.set()
    results = [item for _ in procs for item in await asyncio.to_thread(out.get, True, 60)]
    for p in procs:
        p.join(10)
        assert p.exitcode == 0

    ids = {job_id for job_id, _ in results}
    assert len(results) == 100 and len(ids) == 1
    assert sum(newly for _, newly in results) == 1, "more than one submit created the run"

    async with JobRunner(root, jobs=[Pid], poll_interval=0.05) as runner:
        pid = await runner.handle(ids.pop(), Pid).result(timeout=30)
    assert pid == os.getpid()
    assert len(log.read_text().splitlines()) == 1, "the job executed more than once"


async def test_awaiting_from_a_process_that_runs_no_worker(tmp_path: Path) -> None:
    root = str(tmp_path / "store")
    os.mkdir(root)
    api = JobRunner(root, jobs=[Adder])
    handle = await api.submit(Adder(a=40, b=2))
    out: mp.Queue = SPAWN.Queue()
    child = SPAWN.Process(target=_awaiter, args=(root, handle.id, out))
    child.start()
    async with JobRunner(root, jobs=[Adder], poll_interval=0.05):
        assert await handle.result(timeout=30) == 42
        assert await asyncio.to_thread(out.get, True, 30) == 42
    child.join(10)
    assert child.exitcode == 0
