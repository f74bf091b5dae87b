"""Zombies (guarantees 2 and 4): a worker frozen with SIGSTOP past its lease
while another worker takes the job over and finishes it; then SIGCONT. What
the frozen worker does afterwards changes nothing: the outcome is the second
worker's, the memos are the ones it wrote, the queue stays empty, and the
zombie's settlement comes back LOST. All it adds is its own line of the
run's attempt history, under its own claim number: that it lost its lease.

Two zombies:

- ``heartbeat``: an ordinary worker. Its first heartbeat after SIGCONT finds
  the lease gone and cancels the handler before it writes anything.
- ``blind``: a worker that cannot tell: no heartbeat, and its clock 60 s
  slow, so by its own clock its 60 s lease still holds (while the record's
  expiry, written on that clock, has long passed for everyone else). It runs
  to the end: every memo write finds the first writer's memo, the outcome
  write finds the second worker's outcome, and the fenced ack answers LOST.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from rel_jobs import Gated, SkewedClock, read_events
from rel_support import Workers, stats_of, submitter, wait_for

from stepstone import AttemptResult, JobStatus
from stepstone.records.attempts import decode as decode_attempt
from stepstone.store import ObjectStore

pytestmark = pytest.mark.slow


async def _snapshot(store: ObjectStore) -> dict[str, bytes]:
    """Every object in the store with its bytes, but the workers' own records
    (workers/: every live worker, a zombie too, rewrites its record as it
    beats and marks it stopped as it exits; none of them is a run's)."""
    keys = [info.key async for info in store.scan() if not info.key.startswith("workers/")]
    found = await store.get_many(keys)
    return {obj.key: obj.data for obj in found if obj is not None}


@pytest.fixture(params=["files", "real_s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the store is: a directory, or a real S3 server (CI: Ceph RGW 16,
    whose DeleteObject ignores If-Match: the zombie's fenced ack there is a
    fenced swap to a husk, which must find the record gone too)."""
    if request.param == "files":
        return str(tmp_path / "store")
    url: str = request.getfixturevalue("real_s3_url")
    return url


@pytest.mark.parametrize("zombie", ["heartbeat", "blind"])
async def test_a_zombie_changes_nothing(tmp_path: Path, root: str, zombie: str) -> None:
    events = tmp_path / "events.log"
    gate = tmp_path / "gate"
    pool = Workers(root, events, tmp_path / "logs")
    # The blind zombie's clock is 60 s slow; submit on that clock, or the job
    # would not be due for it for a minute.
    runner = submitter(root, clock=SkewedClock(0 if zombie == "heartbeat" else -60))
    try:
        if zombie == "heartbeat":
            first = pool.start(REL_LEASE="2", REL_GATE=str(gate))
        else:
            first = pool.start(
                REL_LEASE="60", REL_HEARTBEAT="0", REL_CLOCK_OFFSET="-60", REL_GATE=str(gate)
            )
        await pool.ready(first)
        handle = await runner.submit(Gated(n=1))
        run = handle.id

        def in_step_a(pid: int) -> bool:
            return any(e[:4] == ["EXEC", run, "a", str(pid)] for e in read_events(str(events)))

        await wait_for(lambda: in_step_a(first.pid), 15, "the first worker to enter step a")
        os.kill(first.pid, signal.SIGSTOP)

        second = pool.start(REL_LEASE="2")
        outcome = await handle.join(timeout=30)
        # Taken over: a lapse, on the attempt the frozen worker began.
        assert outcome.status is JobStatus.SUCCEEDED
        assert (outcome.attempts, outcome.lapses) == (1, 1)
        store = runner.store

        async def acked() -> bool:
            return not await store.list("queue/jobs/")

        await wait_for(acked, 10, "the ack")
        result = outcome.result
        assert result is not None
        assert [value.split(":")[1] for value in result] == [str(second.pid)] * 3
        before = await _snapshot(store)

        def warned(pid: int, text: str) -> bool:
            return any(
                e[:2] == ["WARN", str(pid)] and text in " ".join(e)
                for e in read_events(str(events))
            )

        if zombie == "heartbeat":
            os.kill(first.pid, signal.SIGCONT)
            await wait_for(lambda: warned(first.pid, "lease lost"), 15, "the zombie to notice")
            gate.touch()
        else:
            gate.touch()
            os.kill(first.pid, signal.SIGCONT)
            await wait_for(
                lambda: warned(first.pid, "ack found the job no longer ours"),
                15,
                "the zombie's ack to come back LOST",
            )
        assert first.poll() is None, "the zombie worker died"
        assert await pool.stop(first) == 0
        assert await pool.stop(second) == 0

        after = await _snapshot(store)
        added = {key: after.pop(key) for key in set(after) - set(before)}
        assert after == before, "the zombie changed the store"
        [(key, record)] = added.items()  # its own claim's line of the history
        assert key.startswith(f"attempts/{run}/") and key.endswith("/000001"), key
        zombie_claim = decode_attempt(record)
        assert (zombie_claim.result, zombie_claim.pid) == (AttemptResult.LOST, first.pid)
        assert [k for k in after if k.startswith("outcomes/")] == [f"outcomes/{run}"]
        assert not [k for k in after if k.startswith("queue/jobs/")]

        log = read_events(str(events))
        mine = [e for e in log if len(e) > 3 and e[1] == run and str(first.pid) in e]
        stats = stats_of(log, first.pid)
        assert stats is not None
        assert stats["succeeded"] == 0 and stats["lost"] >= 1, stats
        if zombie == "heartbeat":
            # Cancelled at its first heartbeat: it wrote nothing at all. (Woken,
            # it may try to claim the run again from what it last knew of its
            # record: a try the store refuses, CLAIMING with no CLAIM.)
            kinds = [e[0] for e in mine]
            assert kinds[:3] == ["CLAIMING", "CLAIM", "EXEC"], mine
            assert set(kinds[3:]) <= {"CLAIMING"}, mine
        else:
            writes = [(e[0], e[2]) for e in mine if e[0].startswith("MEMO-")]
            assert writes == [
                ("MEMO-WRITING", "a"),
                ("MEMO-EXISTS", "a"),
                ("MEMO-WRITING", "b"),
                ("MEMO-EXISTS", "b"),
                ("MEMO-WRITING", "c"),
                ("MEMO-EXISTS", "c"),
            ], mine
            assert ["OUTCOME-EXISTS", run, str(first.pid)] in log
            assert ["OUTCOME-WROTE", run, str(first.pid)] not in log
        print(f"\nzombie ({zombie}): {len(mine)} events, all refused; stats {stats}")
    finally:
        for proc in pool.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
        pool.kill_all()
        await runner.store.close()
