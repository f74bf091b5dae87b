"""Durable waits across real processes, on a directory and on S3 (moto).

Worker processes (``rel_worker.py``) run the jobs of rel_wait_jobs: a step,
a wait (a sleep, an event, three sleeping children), a step. The event log
says how often each step ran (``EXEC``) and when each run got past its wait
(``RESUMED``, from the step right after the wait).

- A SIGKILL of the worker while its runs wait, and a restart of every
  process (the API process too): each run resumes once, on the new worker,
  no earlier than its recorded wake time, and no step runs twice.
- A worker killed as it suspends a sleeper: the next claim replays to the
  same recorded wake time, not a new sleep from the start.
- Two workers carrying the same schedule, one of them SIGKILLed and
  restarted: every tick runs, once.
- An event sent from a process whose clock is 30 s off, to a run another
  process holds (between its look for events and its suspension) and to a
  run suspended waiting: each is taken once, within seconds.

Timing figures (how late each resume was) are printed; run with ``-s``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from rel_jobs import SkewedClock, read_events
from rel_support import Workers, submitter, wait_for
from rel_wait_jobs import AwaitsGo, FansIn, Sleeps

from stepstone import JobRunner, JobStatus
from stepstone.records.calls import PositionedMemo
from stepstone.records.codec import codec_for_type
from stepstone.records.layout import position_of
from stepstone.store import ObjectStore

pytestmark = pytest.mark.slow

SLEEPS = 10
"""The killed-as-it-suspends sleeper's sleep, in seconds."""
LATE_START = 6.0
"""How long after its first worker died the second starts: a sleep begun
anew on its claim would end this much after the recorded wake time."""


@pytest.fixture(params=["files", "s3", "real_s3"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the store is: a directory, or an S3 URL on the moto server or
    on a real server (CI: Ceph RGW 16)."""
    if request.param == "files":
        return str(tmp_path / "store")
    url: str = request.getfixturevalue("real_s3_url" if request.param == "real_s3" else "s3_url")
    return url


def steps_run(events: list[list[str]]) -> Counter[tuple[str, str]]:
    """How many times each (run, step) executed."""
    return Counter((e[1], e[2]) for e in events if e[0] == "EXEC")


def resumes(events: list[list[str]]) -> dict[str, list[tuple[str, float]]]:
    """Each run's passes beyond its wait: (pid, time)."""
    out: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for e in events:
        if e[0] == "RESUMED":
            out[e[1]].append((e[2], float(e[3])))
    return out


async def wake_time(store: ObjectStore, run_id: str) -> float:
    """The wake time the run's first sleep recorded (its memo's value)."""
    keys = [info.key async for info in store.scan(f"memos/{run_id}/")]
    keys = [key for key in keys if position_of(key.rsplit("/", 1)[-1]) is not None]
    memos = [PositionedMemo.decode((await store.get(key)).data) for key in keys]
    sleep = min((m for m in memos if m.call.call == "sleep"), key=lambda m: m.position)
    value: float = codec_for_type(float).decode(sleep.value)
    return value


async def in_state(api: JobRunner, wanted: dict[str, JobStatus]) -> bool:
    for job_id, status in wanted.items():
        state = await api.status(job_id)
        if state is None or state.status is not status:
            return False
    return True


async def test_waiting_runs_survive_a_sigkill_and_a_restart_of_every_process(
    tmp_path: Path, location: str
) -> None:
    events = tmp_path / "events.log"
    pool = Workers(location, events, tmp_path / "logs", REL_LEASE="2", REL_CONCURRENCY="4")
    api = submitter(location)
    try:
        first = pool.start()
        await pool.ready(first)
        sleeper = await api.submit(Sleeps(n=1, seconds=6))
        awaiter = await api.submit(AwaitsGo(n=1))
        parent = await api.submit(FansIn(n=1, children=3, seconds=6))
        suspended = {
            sleeper.id: JobStatus.SLEEPING,
            awaiter.id: JobStatus.WAITING_FOR_EVENT,
            parent.id: JobStatus.WAITING_FOR_CHILDREN,
        }
        await wait_for(lambda: in_state(api, suspended), 30, "the runs to suspend", 0.2)
        pool.kill(first)
        await api.store.close()

        api = submitter(location)  # every process anew
        second = pool.start()
        await pool.ready(second)
        await api.send_event(awaiter.id, "go", "green")
        slept = await api.handle(sleeper.id, Sleeps).result(timeout=60)
        waited = await api.handle(awaiter.id, AwaitsGo).result(timeout=60)
        fanned = await api.handle(parent.id, FansIn).result(timeout=60)
        wake_at = await wake_time(api.store, sleeper.id)
        await pool.stop_all()
    finally:
        pool.kill_all()
        await api.store.close()

    log = read_events(str(events))
    runs = steps_run(log)
    assert set(runs.values()) == {1}, f"a step ran twice: {runs}"
    leaves = [run for run, step in runs if step == "leaf"]
    assert len(leaves) == 3 and len(fanned) == 5
    assert [value.split(":")[0] for value in slept] == ["a", "b"]
    assert waited[1::2] == ["green", None]  # the one event, taken once
    passed = resumes(log)
    for run in suspended:
        assert [pid for pid, _ in passed[run]] == [str(second.pid)], (run, passed[run])
    [(_, resumed_at)] = passed[sleeper.id]
    print(f"\nsleeper resumed {resumed_at - wake_at:+.2f}s after its recorded wake time")
    # (how soon after it is a matter of speed: benchmarks/, not here)
    assert wake_at <= resumed_at


async def test_a_sleeper_killed_as_it_suspends_wakes_at_its_recorded_time(
    tmp_path: Path,
) -> None:
    """Its worker dies on the write that suspends it, after the wake time is
    recorded; the next worker claims it once the lease lapses, replays, and
    sleeps until the recorded time. Started LATE_START s after the death, a
    sleep begun anew on that claim would end at least LATE_START s late."""
    root, events = tmp_path / "store", tmp_path / "events.log"
    pool = Workers(root, events, tmp_path / "logs", REL_LEASE="1")
    api = submitter(root)
    try:
        first = pool.start(REL_KILL="before_suspend=1")
        await pool.ready(first)
        sleeper = await api.submit(Sleeps(n=2, seconds=SLEEPS))
        await wait_for(lambda: first.poll() is not None, 30, "the worker to die suspending")
        await asyncio.sleep(LATE_START)  # the time is the subject: a late second worker
        second = pool.start()
        result = await api.handle(sleeper.id, Sleeps).result(timeout=60)
        wake_at = await wake_time(api.store, sleeper.id)
        await pool.stop_all()
    finally:
        pool.kill_all()
        await api.store.close()

    log = read_events(str(events))
    assert ["KILL", "before_suspend", str(first.pid)] in [e[:3] for e in log]
    assert steps_run(log) == {(sleeper.id, "a"): 1, (sleeper.id, "b"): 1}
    assert len(result) == 2
    [(pid, resumed_at)] = resumes(log)[sleeper.id]
    print(f"\nkilled as it suspended: resumed {resumed_at - wake_at:+.2f}s after its wake time")
    assert pid == str(second.pid)
    # Woken at the recorded time, not by a sleep begun anew on the second
    # worker's claim: that would have ended SLEEPS seconds after the claim,
    # which came after the worker said it was ready.
    [ready_at] = [float(e[2]) for e in log if e[:2] == ["READY", pid]]
    assert wake_at <= resumed_at < ready_at + SLEEPS


async def test_two_workers_with_one_schedule_run_every_tick_once(
    tmp_path: Path, location: str
) -> None:
    events = tmp_path / "events.log"
    pool = Workers(location, events, tmp_path / "logs", REL_SCHEDULE_EVERY="1", REL_LEASE="2")

    def ticks() -> list[list[str]]:
        return [e for e in read_events(str(events)) if e[0] == "TICK"]

    try:
        steady = pool.start()
        killed = pool.start()
        await pool.ready(steady)
        await pool.ready(killed)
        await wait_for(lambda: len(ticks()) >= 3, 30, "three ticks")
        pool.kill(killed)
        await pool.ready(pool.restart(killed))
        await wait_for(lambda: len(ticks()) >= 8, 30, "eight ticks")
        await pool.stop_all()
    finally:
        pool.kill_all()

    by_tick: dict[float, list[tuple[str, str]]] = defaultdict(list)
    for _, at, run, pid in ticks():
        by_tick[float(at)].append((run, pid))
    seen = sorted(by_tick)
    print(f"\n{len(seen)} ticks, {sum(map(len, by_tick.values()))} executions")
    # None skipped while a worker was up: one worker always was.
    assert seen == [seen[0] + i for i in range(len(seen))], seen
    for at, runs in by_tick.items():
        assert len({run for run, _ in runs}) == 1, f"tick {at} ran as {len(runs)} runs"
        # Once, unless its worker was killed while it ran (then the step runs again).
        assert all(pid == str(killed.pid) for _, pid in runs[:-1]), (at, runs)


@pytest.mark.parametrize(
    ("location", "skew"),
    [("files", 30.0), ("files", -30.0), ("s3", 30.0)],
    indirect=["location"],
)
async def test_an_event_from_a_process_whose_clock_is_off_is_taken_once(
    tmp_path: Path, location: str, skew: float
) -> None:
    events, gate = tmp_path / "events.log", tmp_path / "look-gate"
    pool = Workers(location, events, tmp_path / "logs", REL_LEASE="2", REL_LOOK_GATE=str(gate))
    api = submitter(location)
    sender = submitter(location, clock=SkewedClock(skew))

    def looked(run: str) -> bool:
        return any(e[:2] == ["LOOKED", run] for e in read_events(str(events)))

    try:
        await pool.ready(pool.start())
        # Sent while the worker holds the run, after its look for events and
        # before its suspension (held open by the gate): the wake marks the run.
        held = await api.submit(AwaitsGo(n=1))
        await wait_for(lambda: looked(held.id), 30, "the run to look for its event")
        await sender.send_event(held.id, "go", "while held")
        gate.touch()
        assert (await held.result(timeout=30))[1::2] == ["while held", None]

        # Sent while the run waits, suspended.
        waiting = await api.submit(AwaitsGo(n=2))
        suspended = {waiting.id: JobStatus.WAITING_FOR_EVENT}
        await wait_for(lambda: in_state(api, suspended), 30, "the run to suspend", 0.2)
        sent_at = time.time()
        await sender.send_event(waiting.id, "go", "while waiting")
        assert (await waiting.result(timeout=30))[1::2] == ["while waiting", None]
        await pool.stop_all()
    finally:
        pool.kill_all()
        await api.store.close()
        await sender.store.close()

    log = read_events(str(events))
    assert set(steps_run(log).values()) == {1}
    [(_, resumed_at)] = resumes(log)[waiting.id]
    print(f"\nclock {skew:+g}s: the event reached the waiting run in {resumed_at - sent_at:.2f}s")
    # Taken as it came, not when the sender's clock said it would be due (a
    # run that went by the sender's clock would have resumed |skew| late, or
    # never): the bound is the skew, the subject, not a speed.
    assert sent_at <= resumed_at < sent_at + abs(skew)
