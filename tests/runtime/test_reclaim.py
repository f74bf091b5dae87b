"""A worker's id, and the runs a restarted worker takes back under it.

The id is held by a lock on this host (stepstone.runtime.worker.identity):
an explicit id held by a live worker is refused, the default moves on to a
free one. A StoreQueue marks each claim with its holder, and ``reclaim``
hands a new life of that holder its dead life's claims, fenced
(tests/reliability/test_restart_reclaim.py does it with killed processes).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from stepstone.runtime import Reclaiming, WorkerIdInUse
from stepstone.runtime.queue import NewJob
from stepstone.runtime.store_queue import StoreQueue
from stepstone.runtime.worker import Worker
from stepstone.runtime.worker.identity import WorkerIdentity, default_worker_id
from stepstone.store import FileStore, MemoryStore


def test_an_explicit_id_held_by_a_live_worker_is_refused_and_free_once_it_stops() -> None:
    scope_a = f"scope-{uuid.uuid4().hex}"  # (other runs of the suite share the host's locks)
    first, second = WorkerIdentity("w-1"), WorkerIdentity("w-1")
    first.take(scope_a)
    try:
        with pytest.raises(WorkerIdInUse, match="'w-1' is in use by a live worker on this host"):
            second.take(scope_a)
        WorkerIdentity("w-1").take(f"{scope_a}-b")  # another queue: another id
    finally:
        first.release()
    second.take(scope_a)
    second.release()


def test_the_default_id_is_the_hosts_and_the_next_free_one_when_taken() -> None:
    scope = f"scope-{uuid.uuid4().hex}"
    ids = [WorkerIdentity() for _ in range(3)]
    for identity in ids:
        identity.take(scope)
    base = default_worker_id()
    assert [identity.id for identity in ids] == [base, f"{base}-2", f"{base}-3"]
    ids[0].release()
    again = WorkerIdentity()
    again.take(scope)
    assert again.id == base  # a restart gets its id back
    for identity in [*ids[1:], again]:
        identity.release()


async def test_a_worker_given_an_id_held_on_this_host_does_not_start(tmp_path: Path) -> None:
    queue = StoreQueue(FileStore(str(tmp_path)))
    async with Worker(queue, worker_id="w-1"):
        with pytest.raises(WorkerIdInUse):
            await Worker(queue, worker_id="w-1").start()
    await Worker(queue, worker_id="w-1").stop()  # never started: nothing to stop


async def test_reclaim_takes_back_the_holders_claims_only_and_fences_the_old_tokens(
    tmp_path: Path,
) -> None:
    store = FileStore(str(tmp_path))
    dead_life = StoreQueue(store)
    for i in range(4):
        await dead_life.enqueue(b"x", kind="k", id=f"job-{i}")
    mine = await dead_life.claim(2, lease=600, holder="w-1@here")
    theirs = await dead_life.claim(1, lease=600, holder="w-2@here")
    handed = await dead_life.enqueue_claimed(
        NewJob(b"y", "k", "job-handed"), lease=600, holder="w-1@here"
    )
    assert handed[1] is not None

    new_life = StoreQueue(store)
    assert isinstance(new_life, Reclaiming)
    taken = await new_life.reclaim("w-1@here", lease=600, limit=10, within=60)
    assert sorted(d.id for d in taken) == sorted([*(d.id for d in mine), "job-handed"])
    # Taken back as a lapsed lease is taken over: a lapse, not an attempt.
    assert all((d.attempt, d.claims, d.lapses) == (1, 2, 1) for d in taken)
    for old in [*mine, handed[1]]:
        assert await dead_life.renew(old, 600) is None  # fenced off
    assert await dead_life.renew(theirs[0], 600) is not None  # someone else's: untouched
    assert await new_life.reclaim("w-1@elsewhere", lease=600, limit=10, within=60) == []
    # The one left waiting is claimed as ever.
    assert [d.id for d in await new_life.claim(5, lease=600)] == ["job-3"]


async def test_reclaim_stops_at_its_limit_and_reads_only_recent_changes(tmp_path: Path) -> None:
    store = FileStore(str(tmp_path))
    dead_life = StoreQueue(store)
    for i in range(3):
        await dead_life.enqueue(b"x", kind="k", id=f"job-{i}")
    await dead_life.claim(3, lease=600, holder="w-1@here")
    new_life = StoreQueue(store)
    assert len(await new_life.reclaim("w-1@here", lease=600, limit=2, within=60)) == 2
    # A window that ends before the claims were made reads nothing.
    later = StoreQueue(store)
    assert await later.reclaim("w-1@here", lease=600, limit=10, within=-60) == []
    assert later.stats.fetches == 0


async def test_a_memory_store_is_its_own_scope() -> None:
    a, b = StoreQueue(MemoryStore()), StoreQueue(MemoryStore())
    assert a.holder_scope != b.holder_scope


def test_only_a_start_after_a_life_killed_holding_the_id_follows_a_kill() -> None:
    scope = f"scope-{uuid.uuid4().hex}"
    first = WorkerIdentity("w-1")
    first.take(scope)
    assert not first.after_a_kill  # the first life under the id
    first.release()  # a worker that stops lets its id go
    second = WorkerIdentity("w-1")
    second.take(scope)
    assert not second.after_a_kill
    second.release()
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, signal, sys\n"
            "from stepstone.runtime.worker.identity import WorkerIdentity\n"
            "WorkerIdentity('w-1').take(sys.argv[1])\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n",
            scope,
        ],
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL
    third = WorkerIdentity("w-1")
    third.take(scope)
    assert third.after_a_kill
    third.release()


async def test_a_fresh_worker_does_not_read_a_recent_backlog_to_look_for_runs_of_its_own(
    tmp_path: Path,
) -> None:
    """A fleet starting over a backlog submitted just before: each worker
    reads only what it claims, not every record (the look for a previous
    life's runs is for a start after a kill)."""
    store = FileStore(str(tmp_path))
    submitter = StoreQueue(store)
    for i in range(40):
        await submitter.enqueue(b"x", kind="k", id=f"job-{i}")
    queue = StoreQueue(store)
    worker = Worker(queue, worker_id=f"w-{uuid.uuid4().hex[:8]}", concurrency=1)
    await worker.start()
    await worker.stop()
    assert queue.stats.fetches < 10
