"""A worker killed with SIGKILL and started again under its id takes back its
runs at once (guarantee: docs/guarantees.md, "a restarted worker resumes its
own runs"); another id does not; two live workers on one host with one id
cannot both run. Each one's record (``workers/``, what ``stepstone workers``
and the workers page read) says which are live, gone or stopped.

Real ``stepstone worker`` processes on a directory store, with a lease of
600 s (rel_reclaim_app.py): a run that starts again within the test was
taken back, since its lease cannot have lapsed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rel_reclaim_app import Held, Quick
from rel_support import wait_for

from stepstone import JobRunner
from stepstone.ops.workers import read_workers
from stepstone.runtime.clock import FakeClock
from stepstone.runtime.queue import DEFAULT_LEASE
from stepstone.runtime.worker.presence import BEAT, GONE_AFTER

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
WORKER = [sys.executable, "-m", "stepstone", "worker", "rel_reclaim_app:runner"]


class Worker:
    """``stepstone worker rel_reclaim_app:runner --worker-id ID``, its stderr kept."""

    def __init__(self, store: Path, log: Path, worker_id: str) -> None:
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [*WORKER, "--worker-id", worker_id],
                env={**os.environ, "RECLAIM_STORE": str(store)},
                cwd=str(HERE),
                stdout=subprocess.DEVNULL,
                stderr=out,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM, as a deploy stops it: it drains and exits."""
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(60) == 0, self.text()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def starts(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@contextlib.asynccontextmanager
async def api_runner(store: Path) -> AsyncIterator[JobRunner]:
    """A runner that submits and awaits, as an API process: it runs no worker."""
    runner = JobRunner(str(store), jobs=[Held, Quick])
    try:
        yield runner
    finally:
        await runner.close()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    root.mkdir()
    return root


async def test_a_worker_killed_and_started_again_under_its_id_takes_back_its_run(
    store: Path, tmp_path: Path
) -> None:
    marks = tmp_path / "starts"
    workers: list[Worker] = []
    async with api_runner(store) as api:
        try:
            workers.append(Worker(store, tmp_path / "w1.log", "w-1"))
            handle = await api.submit(Held(path=str(marks)))
            await wait_for(lambda: len(starts(marks)) == 1, 60, "the first attempt")
            workers[0].kill()
            workers.append(Worker(store, tmp_path / "w2.log", "w-1"))
            assert await handle.result(timeout=60) == 2
            # Started twice, both on its first attempt: taken back as a
            # lapse, which costs no attempt.
            assert [line.split()[:2] for line in starts(marks)] == [["1", "1"], ["2", "1"]]
            assert "took back 1 run(s) its previous life held" in workers[1].text()
        finally:
            for worker in workers:
                worker.kill()


async def test_a_worker_started_under_another_id_leaves_them_to_their_lease(
    store: Path, tmp_path: Path
) -> None:
    marks = tmp_path / "starts"
    workers: list[Worker] = []
    async with api_runner(store) as api:
        try:
            workers.append(Worker(store, tmp_path / "w1.log", "w-1"))
            await api.submit(Held(path=str(marks)))
            await wait_for(lambda: len(starts(marks)) == 1, 60, "the first attempt")
            workers[0].kill()
            workers.append(Worker(store, tmp_path / "w2.log", "w-2"))
            # The new worker claims and runs new work, but not the dead one's run.
            assert await (await api.submit(Quick(n=7))).result(timeout=60) == 7
            assert len(starts(marks)) == 1
            assert "took back" not in workers[1].text()
        finally:
            for worker in workers:
                worker.kill()


async def test_a_second_live_worker_with_the_same_id_on_a_host_is_refused(
    store: Path, tmp_path: Path
) -> None:
    marks = tmp_path / "starts"
    first = Worker(store, tmp_path / "w1.log", "w-1")
    try:
        async with api_runner(store) as api:
            await api.submit(Held(path=str(marks)))
            await wait_for(lambda: len(starts(marks)) == 1, 60, "the first attempt")
            second = Worker(store, tmp_path / "w2.log", "w-1")
            assert second.proc.wait(60) == 1
            text = second.text()
            assert "worker id 'w-1' is in use by a live worker on this host" in text
            assert "Traceback" not in text
            # The refused one never wrote a record: one live w-1, holding the run.
            (row,) = (await read_workers(api)).rows
            assert (row.record.worker_id, row.state, row.record.pid) == (
                "w-1",
                "live",
                first.proc.pid,
            )
            assert not row.shared_id
            # The first goes on: its run was not taken from it.
            assert first.proc.poll() is None
            assert await (await api.submit(Quick(n=3))).result(timeout=60) == 3
            assert len(starts(marks)) == 1
    finally:
        first.kill()


async def test_a_killed_worker_shows_gone_after_missed_beats_and_its_restart_replaces_it(
    store: Path, tmp_path: Path
) -> None:
    marks = tmp_path / "starts"
    workers: list[Worker] = []
    async with api_runner(store) as api:
        try:
            workers.append(Worker(store, tmp_path / "w1.log", "w-1"))
            handle = await api.submit(Held(path=str(marks)))
            await wait_for(lambda: len(starts(marks)) == 1, 60, "the first attempt")

            async def beating() -> bool:
                return len((await read_workers(api)).rows) == 1

            await wait_for(beating, 60, "its first beat")
            workers[0].kill()
            (dead,) = (await read_workers(api)).rows
            assert dead.state == "live"  # until it misses its beats
            later = JobRunner(str(store), clock=FakeClock(dead.record.beat_at))
            later.clock.advance(GONE_AFTER * BEAT + 1)  # type: ignore[attr-defined]
            assert [row.state for row in (await read_workers(later)).rows] == ["gone"]
            await later.close()

            workers.append(Worker(store, tmp_path / "w2.log", "w-1"))
            assert await handle.result(timeout=60) == 2

            async def replaced() -> bool:
                rows = (await read_workers(api)).rows
                return [row.record.pid for row in rows] == [workers[1].proc.pid]

            await wait_for(replaced, 60, "the restart's record in place of the dead one's")
            workers[1].stop()
            (row,) = (await read_workers(api)).rows
            assert (row.state, row.record.held) == ("stopped", 0)
        finally:
            for worker in workers:
                worker.kill()


async def test_a_killed_worker_shows_gone_within_about_a_lease_with_the_runs_it_held(
    store: Path, tmp_path: Path
) -> None:
    """At the default beat, a live worker's record lists the runs it holds
    within a beat of their start, and once the worker is SIGKILLed it shows
    as gone within about a lease (two beats: 10 s), the runs it held still
    named: ``stepstone workers`` as an operator runs it."""
    first, second = tmp_path / "first", tmp_path / "second"
    worker = Worker(store, tmp_path / "w1.log", "w-1")
    async with api_runner(store) as api:
        try:
            held = [await api.submit(Held(path=str(path))) for path in (first, second)]
            await wait_for(lambda: bool(starts(first) and starts(second)), 60, "both runs started")

            async def holding() -> bool:
                rows = (await read_workers(api)).rows
                return [(r.state, r.record.held, set(r.record.runs)) for r in rows] == [
                    ("live", 2, {h.id for h in held})
                ]

            # Within a beat (5 s), and a loaded machine's margin: well before
            # the 30 s beat of earlier releases listed them.
            await wait_for(holding, 15, "its record to list both runs")
            worker.kill()

            async def gone() -> bool:
                return [row.state for row in (await read_workers(api)).rows] == ["gone"]

            # Gone two beats after its last one, a lease (10 s); the deadline
            # leaves a loaded machine room, and is a third of the 90 s it took
            # when workers beat every 30 s and were gone after three beats.
            await wait_for(gone, 3 * DEFAULT_LEASE, "the killed worker to show gone")
        finally:
            worker.kill()
    shown = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "stepstone", "workers", "--json", "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    [row] = json.loads(shown.stdout)["workers"]
    assert (row["id"], row["state"], row["held"]) == ("w-1", "gone", 2)
    assert set(row["runs"]) == {h.id for h in held}
