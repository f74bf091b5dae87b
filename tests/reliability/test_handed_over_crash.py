"""A process killed while it runs the jobs it submitted (guarantees 2 and 5).

A process whose worker has room hands each job it submits to that worker as
it writes it: the queue record is created already claimed, and no other
process is told of it. Killed with SIGKILL while those jobs run, it leaves
records claimed by a process that is gone. Another process must run every
one of them once their leases lapse, each to one outcome.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
from pathlib import Path
from typing import ClassVar

from rel_support import wait_for

from stepstone import Job, JobContext, JobRunner, JobStatus
from stepstone.runtime import StoreQueue
from stepstone.store import FileStore

DEADLINE = 60.0
LEASE = 2.0


class HangsFirst(Job[int]):
    """Notes each start (and its attempt) in a file; its first start then hangs (until killed)."""

    NAME: ClassVar[str] = "test.hangs-first"
    n: int
    log: str

    async def run(self, ctx: JobContext) -> int:
        first = not [line for line in _lines(self.log) if line.split()[0] == str(self.n)]
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, b"%d %d\n" % (self.n, ctx.attempt))
        finally:
            os.close(fd)
        if first:
            await asyncio.Event().wait()
        return self.n * 10


def _submit_and_die(root: str, log: str, ids: str) -> None:
    """Submit five jobs to this process's idle worker, wait until all five
    run, write their ids down, and die."""

    async def main() -> None:
        async with JobRunner(FileStore(root), jobs=[HangsFirst], lease=LEASE) as runner:
            await wait_for(lambda: runner.worker.ready_for(HangsFirst.NAME), DEADLINE, "idle")
            handles = [await runner.submit(HangsFirst(n=n, log=log)) for n in range(5)]
            Path(ids).write_text("\n".join(h.id for h in handles))  # noqa: ASYNC240
            await wait_for(lambda: _starts(log) == 5, DEADLINE, "all five to start")
            os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main())


def _lines(log: str) -> list[str]:
    return Path(log).read_text().splitlines() if os.path.exists(log) else []


def _starts(log: str) -> int:
    return len(_lines(log))


def test_jobs_handed_over_by_a_killed_process_run_once_their_leases_lapse(
    tmp_path: Path,
) -> None:
    root, log, ids = tmp_path / "store", tmp_path / "ran", tmp_path / "ids"
    root.mkdir()
    child = multiprocessing.get_context("spawn").Process(
        target=_submit_and_die, args=(str(root), str(log), str(ids))
    )
    child.start()
    child.join(DEADLINE)
    assert child.exitcode == -signal.SIGKILL
    job_ids = ids.read_text().split()

    async def after() -> list[int]:
        store = FileStore(root)
        queue = StoreQueue(store)
        for job_id in job_ids:
            record = await queue.get(job_id)
            assert record is not None and record.status is JobStatus.RUNNING
            # written claimed: the record was never changed after its create
            assert record.updated_at == record.created_at and record.attempts == 1
        async with JobRunner(store, jobs=[HangsFirst], lease=LEASE) as runner:
            results = await asyncio.wait_for(
                asyncio.gather(*(runner.handle(i, HangsFirst) for i in job_ids)), DEADLINE
            )
            runner_queue = runner.queue
            assert isinstance(runner_queue, StoreQueue)

            async def empty() -> bool:
                return sum((await runner_queue.counts()).values()) == 0

            await wait_for(empty, DEADLINE, "the queue to empty")
        await store.close()
        return list(results)

    assert asyncio.run(after()) == [0, 10, 20, 30, 40]
    starts = sorted(tuple(map(int, line.split())) for line in log.read_text().splitlines())
    # Each started twice, both times on its first attempt: the lapse cost none.
    assert starts == sorted([(n, 1) for n in range(5)] * 2)
