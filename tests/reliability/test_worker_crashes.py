"""What a worker's crash costs a run (docs/guarantees.md, "What a worker's
crash costs a run"): no attempt. Workers SIGKILLed three times under four
healthy runs (each with ``max_attempts`` 3) leave them on their first
attempt, three lapses each, and every one succeeds with each step run once;
the worker's log, ``stepstone ls``, ``show``, ``history`` and the outcome
all say the same. A run whose workers keep dying under it is stopped at
``max_lapses``, as ``expired``, without running again.

Real ``stepstone worker`` processes on a directory store, restarted under
one worker id (each takes back at once what its killed life held, which is
how a lapsed lease is taken over, without waiting out the lease).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rel_crash_app import Steady
from rel_support import wait_for

from stepstone import FailureKind, IdempotencyKey, JobRunner, JobStatus

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
WORKER = [sys.executable, "-m", "stepstone", "worker", "rel_crash_app:runner"]
RUNS = 4
DEADLINE = 60.0


class Fleet:
    """``stepstone worker rel_crash_app:runner --worker-id w``, one life at a time."""

    def __init__(self, store: Path, shared: Path, logs: Path, **env: str) -> None:
        self.store, self.shared, self.logs = store, shared, logs
        self.env = {**os.environ, "CRASH_STORE": str(store), "CRASH_DIR": str(shared), **env}
        self.lives: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        with open(self.logs / f"life-{len(self.lives) + 1}.log", "wb") as log:
            proc = subprocess.Popen(
                [*WORKER, "--worker-id", "w"],
                env=self.env,
                cwd=str(HERE),
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        self.lives.append(proc)
        return proc

    def log(self, life: int) -> str:
        return (self.logs / f"life-{life}.log").read_text(errors="replace")

    def kill_all(self) -> None:
        for proc in self.lives:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "stepstone", *args, "--store", str(self.store)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    store, shared, logs = tmp_path / "store", tmp_path / "shared", tmp_path / "logs"
    for path in (store, shared, logs):
        path.mkdir()
    made = Fleet(store, shared, logs)
    yield made
    made.kill_all()


def starts(shared: Path) -> list[tuple[int, int]]:
    """(run number, attempt) of every start so far."""
    path = shared / "starts"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(int(n), int(attempt)) for n, attempt, _ in (line.split() for line in lines)]


async def kill_under_runs(fleet: Fleet, kills: int, runs: int) -> None:
    """Start a worker life, wait until it holds every run (each started
    under it), SIGKILL it; ``kills`` times."""
    for life in range(1, kills + 1):
        proc = fleet.start()
        await wait_for(
            lambda life=life: len(starts(fleet.shared)) == runs * life,
            DEADLINE,
            f"life {life} to start all {runs} runs",
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait()


async def test_three_crashes_of_their_workers_cost_healthy_runs_no_attempt(fleet: Fleet) -> None:
    api = JobRunner(str(fleet.store))  # submits and reads; runs nothing
    try:
        handles = [await api.submit(Steady(n=n)) for n in range(RUNS)]
        await kill_under_runs(fleet, kills=3, runs=RUNS)
        fleet.start()
        await wait_for(
            lambda: len(starts(fleet.shared)) == RUNS * 4, DEADLINE, "the fourth life's starts"
        )
        (fleet.shared / "go").touch()
        outcomes = [await handle.join(timeout=DEADLINE) for handle in handles]
    finally:
        await api.close()

    # Nothing lost, nothing run twice that had finished: each step once per run.
    assert [o.result for o in outcomes] == [f"a{n}+b{n}" for n in range(RUNS)]
    for step in ("a", "b"):
        ran = sorted(int(n) for n in (fleet.shared / f"ran-{step}").read_text().split())
        assert ran == list(range(RUNS)), step
    # Four starts each, every one on attempt 1: the three crashes cost none.
    assert sorted(starts(fleet.shared)) == sorted((n, 1) for n in range(RUNS) for _ in range(4))

    # One count everywhere: the outcome, the worker's log, ls, show, history.
    assert {(o.status, o.attempts, o.lapses) for o in outcomes} == {(JobStatus.SUCCEEDED, 1, 3)}
    said = fleet.log(4)
    for handle in handles:
        assert (
            f"run {handle.id} (crash.steady) attempt 1/3 taken over from a lapsed lease "
            "(lapse 3) (claim 4)"
        ) in said, said
    listed = json.loads(fleet.cli("ls", "--json"))["runs"]
    assert {(row["attempts"], row["lapses"]) for row in listed} == {(1, 3)}
    assert len(listed) == RUNS
    text = fleet.cli("ls")
    assert [line.split()[3] for line in text.splitlines()[1:-1]] == ["1"] * RUNS  # TRIES
    shown = json.loads(fleet.cli("show", "--key", "steady:0", "--json"))
    assert (shown["outcome"]["attempts"], shown["outcome"]["lapses"]) == (1, 3)
    text = fleet.cli("show", "--key", "steady:0")
    assert "  attempts     1\n  lapses       3 lease(s) lost to workers that died or hung" in text
    history = json.loads(fleet.cli("history", "--key", "steady:0", "--json"))["attempts"]
    assert [a["claim"] for a in history] == [1, 2, 3, 4]
    assert [a["result"] for a in history][-1] == "succeeded"
    assert {a["attempt"] for a in history if a["attempt"] is not None} == {1}


async def test_a_run_whose_workers_keep_dying_stops_at_max_lapses(fleet: Fleet) -> None:
    fleet.env["CRASH_MAX_LAPSES"] = "2"
    api = JobRunner(str(fleet.store))
    try:
        handle = await api.submit(Steady(n=7))
        await kill_under_runs(fleet, kills=2, runs=1)
        fleet.start()
        outcome = await handle.join(timeout=DEADLINE)
        state = await api.status(IdempotencyKey("steady:7"))
    finally:
        await api.close()
    assert starts(fleet.shared) == [(7, 1), (7, 1)]  # not run a third time
    assert outcome.status is JobStatus.FAILED and outcome.error is not None
    assert outcome.error.reason is FailureKind.EXPIRED
    message = (
        "its lease lapsed 2 times (its workers died or hung under it), "
        "the most a run is given (2), on attempt 1"
    )
    assert outcome.error.message == message
    assert (outcome.attempts, outcome.lapses) == (1, 2)
    assert state is not None and (state.attempts, state.lapses) == (1, 2)
    assert f"attempt 1/3, 2 lapsed): failed for good: expired: {message}" in fleet.log(3)
    shown = json.loads(fleet.cli("show", "--key", "steady:7", "--json"))
    assert (shown["queue"]["attempts"], shown["queue"]["lapses"]) == (1, 2)
    assert shown["queue"]["dead_reason"] == f"expired: {message}"
