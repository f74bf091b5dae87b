"""A power cut right after submits returned, on a FileStore (guarantees 1, 2 and 5).

A submit on files is durable once its queue record is in the store's create
journal: one flush, not two of the whole filesystem. This test kills the
submitting process the moment its last submit returned, does to the files
what a power cut may do to anything not yet flushed (every queue record
written since the journal was last retired is lost), and starts again as
the machine's next boot would. Every job submitted runs, and runs once: the
ones still waiting are brought back from the journal; the ones already run,
acked and deleted before the cut come back too (nothing on the disk tells
them from the lost ones), marked as claimed before, so their worker finds
their outcome and settles them without running them again.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
from pathlib import Path
from typing import ClassVar

import pytest
from rel_support import wait_for

import stepstone.store.file.recovery as recovery_module
from stepstone import Job, JobContext, JobRunner
from stepstone.runtime import StoreQueue
from stepstone.store import FileStore
from stepstone.store.file.store import CommitIn

DEADLINE = 60.0


class Logged(Job[int]):
    """Appends its number to a file each time it runs (one ``write``, O_APPEND)."""

    NAME: ClassVar[str] = "test.power-cut"
    n: int
    log: str
    keyed: bool = False

    def idempotency_key(self) -> str | None:
        return f"power-cut:{self.n}" if self.keyed else None

    async def run(self, ctx: JobContext) -> int:
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, b"%d\n" % self.n)
        finally:
            os.close(fd)
        return self.n * 10


def _jobs(log: str, numbers: range) -> list[Logged]:
    return [Logged(n=n, log=log, keyed=n % 2 == 0) for n in numbers]


def _submit_then_die(root: str, log: str, ids: str, commit_in: CommitIn) -> None:
    """Run three jobs to the end, submit three more without a worker, write
    down every id, and die, the journal never retired (no flush of the
    filesystem since the first submit, as far as the journal knows). The
    store commits its other writes ``commit_in`` (its helper dies with it)."""
    from stepstone.store.file.journal import Journal

    Journal.retire = lambda self, mark: None  # type: ignore[method-assign]

    async def main() -> None:
        runner = JobRunner(FileStore(root, commit_in=commit_in), jobs=[Logged])
        async with runner:
            ran = [await runner.submit(job) for job in _jobs(log, range(3))]
            assert [await h for h in ran] == [0, 10, 20]
        waiting = [await runner.submit(job) for job in _jobs(log, range(3, 6))]
        Path(ids).write_text("\n".join(h.id for h in ran + waiting))  # noqa: ASYNC240
        os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main())


@pytest.mark.parametrize("commit_in", ["thread", "process"])
def test_every_submitted_job_runs_once_after_a_power_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, commit_in: CommitIn
) -> None:
    root, log, ids = tmp_path / "store", tmp_path / "ran", tmp_path / "ids"
    root.mkdir()
    child = multiprocessing.get_context("spawn").Process(
        target=_submit_then_die, args=(str(root), str(log), str(ids), commit_in)
    )
    child.start()
    child.join(DEADLINE)
    assert child.exitcode == -signal.SIGKILL
    job_ids = ids.read_text().split()
    # The three ran before the cut, each once (in any order: they ran side by side).
    assert sorted(log.read_text().split()) == ["0", "1", "2"]

    # The power cut: every queue record written since the journal was
    # retired is lost (the three waiting ones; the three run were deleted).
    records = root / "queue" / "jobs"
    assert sorted(p.name for p in records.iterdir()) == sorted(job_ids[3:])
    for path in records.iterdir():
        path.unlink()

    monkeypatch.setattr(recovery_module, "boot_id", lambda: b"\x01" * 16)

    async def after_the_cut() -> list[int]:
        store = FileStore(root)
        assert sorted(p.name for p in records.iterdir()) == sorted(job_ids)  # all six back
        async with JobRunner(store, jobs=[Logged]) as runner:
            results = [await runner.handle(i, Logged) for i in job_ids]
            queue = runner.queue
            assert isinstance(queue, StoreQueue)

            async def empty() -> bool:
                return sum((await queue.counts()).values()) == 0

            await wait_for(empty, DEADLINE, "the queue to empty")
        await store.close()
        return results

    assert asyncio.run(after_the_cut()) == [0, 10, 20, 30, 40, 50]
    assert sorted(log.read_text().split()) == ["0", "1", "2", "3", "4", "5"]  # each once
