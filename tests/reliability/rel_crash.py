"""The crash run: worker processes SIGKILLed at random moments, restarted
until every job has finished, then an audit of what the store and the event
log say happened. Used by test_crash.py (CI size) and benchmarks/soak.py
(bigger, longer).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
from rel_jobs import STEPS, ThreeSteps, read_events
from rel_support import Workers

from stepstone.records.calls import Call, PositionedMemo
from stepstone.records.layout import position_key
from stepstone.records.outcome import OutcomeRecord
from stepstone.runtime.status import JobStatus
from stepstone.store import ObjectStore

DEFAULT_KILLS = (
    "in_step=0.01,before_memo=0.01,after_memo=0.01,"
    "before_outcome=0.01,after_outcome=0.02,after_claim=0.005"
)


@dataclass
class CrashReport:
    jobs: int
    workers: int
    lease: float
    kill_spec: str
    seed: int
    elapsed: float = 0.0
    kills: int = 0
    """Worker processes that died by SIGKILL (their own hooks and the parent's)."""
    self_kills: Counter[str] = field(default_factory=Counter)
    parent_kills: int = 0
    executions: int = 0
    repeats: int = 0
    """Step executions beyond the first of the same step of the same run."""
    repeats_after_death: int = 0
    """Repeats whose earlier execution's process was killed before its memo landed."""
    repeats_overlap: int = 0
    """Repeats whose earlier execution was still alive (a lease lapsed under it)."""
    outcomes: int = 0
    succeeded: int = 0
    lost: int = 0
    """Jobs with no outcome record."""
    queue_left: int = 0
    max_attempts_seen: int = 0
    max_lapses_seen: int = 0
    claims: int = 0
    """Claims that landed (CLAIM lines): ``jobs`` when every job ran once."""
    runs_claimed_twice: int = 0
    problems: list[str] = field(default_factory=list)

    def figures(self) -> str:
        points = ", ".join(f"{p} {n}" for p, n in sorted(self.self_kills.items())) or "none"
        return (
            f"jobs {self.jobs} (3 steps each), workers {self.workers}, lease {self.lease:g}s: "
            f"kills {self.kills} (self {sum(self.self_kills.values())}: {points}; "
            f"parent {self.parent_kills}), step executions {self.executions}, "
            f"repeats {self.repeats} (after a kill {self.repeats_after_death}, "
            f"overlapping a live holder {self.repeats_overlap}), outcomes {self.outcomes} "
            f"(succeeded {self.succeeded}), lost {self.lost}, queue left {self.queue_left}, "
            f"claims {self.claims} (runs claimed more than once {self.runs_claimed_twice}), "
            f"most attempts {self.max_attempts_seen}, most lapses {self.max_lapses_seen}, "
            f"problems {len(self.problems)}, "
            f"{self.elapsed:.1f}s"
        )


async def _count(store: ObjectStore, prefix: str) -> int:
    return len([info async for info in store.scan(prefix)])


async def run_crash(
    base: Path,
    *,
    jobs: int = 300,
    workers: int = 4,
    concurrency: int = 8,
    lease: float = 2.0,
    kill_spec: str = DEFAULT_KILLS,
    parent_kill_every: tuple[float, float] | None = (0.5, 2.0),
    seed: int = 1,
    deadline: float = 150.0,
    stall: float = 120.0,
    per_worker: list[dict[str, str]] | None = None,
    store: str = "",
    branches: bool = False,
    **env: str,
) -> CrashReport:
    """Run ``jobs`` ThreeSteps jobs over ``workers`` killable worker processes.

    ``store`` is where (a URL; a directory ``base/store`` by default);
    ``per_worker`` gives each worker its own environment overrides (a clock
    offset, say); ``env`` applies to all. ``parent_kill_every=None``: the
    parent kills nobody; otherwise it kills a worker that has been up (since
    its READY) for a draw of ``parent_kill_every`` seconds, so a loaded
    machine, whose workers take seconds to start, gets as violent a run per
    second of work, not one whose workers die before they claim. The run
    fails after ``deadline`` seconds, or once ``stall`` seconds passed with
    no new outcome, whichever is later: slow is not stuck.
    ``branches``: each run's three steps are three concurrent branches of it."""
    from rel_support import submitter

    root, events = store or base / "store", base / "events.log"
    report = CrashReport(jobs, workers, lease, kill_spec, seed)
    pool = Workers(
        root,
        events,
        base / "logs",
        REL_KILL=kill_spec,
        REL_SEED=str(seed),
        REL_LEASE=str(lease),
        REL_CONCURRENCY=str(concurrency),
        **({"REL_BRANCHES": "1"} if branches else {}),
        **env,
    )
    rng = random.Random(seed)
    started = time.monotonic()
    runner = submitter(root)
    try:
        for i in range(workers):
            pool.start(**(per_worker[i] if per_worker else {}))
        handles = await asyncio.wait_for(
            asyncio.gather(*(runner.submit(ThreeSteps(n=i)) for i in range(jobs))), deadline
        )
        expected = {h.id for h in handles}
        if len(expected) != jobs:
            report.problems.append(f"{jobs} submits gave {len(expected)} distinct run ids")

        up_for = rng.uniform(*(parent_kill_every or (0, 0)))
        up = UpSince(events)
        next_count = 0.0
        progress_at, outcomes = time.monotonic(), 0
        while True:
            for proc in pool.dead():
                if proc.returncode == -9:
                    report.kills += 1
                pool.restart(proc)
            now = time.monotonic()
            if now >= next_count:  # (a listing of both, twice a second)
                next_count = now + 0.5
                seen, outcomes = outcomes, await _count(runner.store, "outcomes/")
                left = await _count(runner.store, "queue/jobs/")
                if outcomes >= jobs and left == 0:
                    break
                if outcomes > seen:
                    progress_at = now
            if now > started + deadline and now > progress_at + stall:
                report.problems.append(
                    f"not finished after {now - started:.0f}s, the last {now - progress_at:.0f}s "
                    f"without a new outcome: {outcomes} outcomes, "
                    f"{left} queue records\n{pool.log_tail()}"
                )
                break
            if parent_kill_every:
                ready = up.since(time.time())
                due = [p for p in pool.alive() if ready.get(p.pid, -math.inf) >= up_for]
                if due:
                    pool.kill(rng.choice(due))
                    report.parent_kills += 1
                    up_for = rng.uniform(*parent_kill_every)
            await asyncio.sleep(0.05)  # the parent's pace: a count, a kill, a restart
        report.elapsed = time.monotonic() - started
        await pool.stop_all()
        for proc in pool.procs:
            if proc.returncode == -9:
                report.kills += 1
        await audit(report, runner.store, events, expected, branches)
    finally:
        pool.kill_all()
        await runner.store.close()
    return report


class UpSince:
    """How long each worker has been up, from the READY lines of the event
    log (read on from where the last look ended)."""

    def __init__(self, events: Path) -> None:
        self._events = events
        self._offset = 0
        self._ready: dict[int, float] = {}

    def since(self, now: float) -> dict[int, float]:
        """Seconds since each worker that said READY did, by pid."""
        if self._events.exists():
            with self._events.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1  # (a line being written waits for the next look)
            self._offset += end
            for line in chunk[:end].decode().splitlines():
                words = line.split()
                if len(words) >= 3 and words[0] == "READY":
                    self._ready[int(words[1])] = float(words[2])
        return {pid: now - at for pid, at in self._ready.items()}


async def _keys(store: ObjectStore, prefix: str) -> list[str]:
    """The keys under ``prefix``, less it."""
    return [info.key[len(prefix) :] async for info in store.scan(prefix)]


async def audit(
    report: CrashReport,
    store: ObjectStore,
    events_path: Path,
    expected: set[str],
    branches: bool = False,
) -> None:
    """Check the store and the event log against the guarantees; fill in the figures."""
    problems = report.problems
    events = read_events(str(events_path))

    execs: dict[tuple[str, str], list[tuple[int, str, str]]] = defaultdict(list)
    wrote: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)
    exists: set[str] = set()
    claims: dict[tuple[str, str], list[int]] = defaultdict(list)
    claiming: dict[tuple[str, str], list[int]] = defaultdict(list)
    deaths: dict[str, int] = {}
    outcome_writes: Counter[str] = Counter()
    for i, e in enumerate(events):
        match e:
            case ["EXEC", run, step, pid, token]:
                execs[(run, step)].append((i, pid, token))
            case ["MEMO-WROTE", run, step, pid, token]:
                wrote[(run, step)].append((i, token))
            case ["MEMO-EXISTS", _run, _step, _pid, token]:
                exists.add(token)
            case ["CLAIMING", run, pid, _claims]:
                claiming[(run, pid)].append(i)
            case ["CLAIM", run, pid, _claims]:
                claims[(run, pid)].append(i)
            case ["KILL", point, pid, _detail]:
                report.self_kills[point] += 1
                deaths.setdefault(pid, i)
            case ["PKILL", pid]:
                deaths.setdefault(pid, i)
            case ["OUTCOME-WROTE", run, _pid]:
                outcome_writes[run] += 1

    claimed: Counter[str] = Counter()
    for (run, _pid), positions in claims.items():
        claimed[run] += len(positions)
    report.claims = sum(claimed.values())
    report.runs_claimed_twice = sum(1 for n in claimed.values() if n > 1)

    # Outcomes: one per run, every run, all succeeded, each the memos' values.
    outcome_files = set(await _keys(store, "outcomes/"))
    report.outcomes = len(outcome_files & expected)
    report.lost = len(expected - outcome_files)
    if outcome_files - expected:
        problems.append(f"outcomes for runs never submitted: {sorted(outcome_files - expected)}")
    report.queue_left = len(await _keys(store, "queue/jobs/"))
    for run, n in outcome_writes.items():
        if n > 1:
            problems.append(f"run {run}: its outcome was written {n} times")

    for run in sorted(expected & outcome_files):
        record = OutcomeRecord.decode((await store.get(f"outcomes/{run}")).data)
        report.max_attempts_seen = max(report.max_attempts_seen, record.attempts)
        report.max_lapses_seen = max(report.max_lapses_seen, record.lapses)
        if record.status is not JobStatus.SUCCEEDED or record.result is None:
            problems.append(f"run {run}: {record.status.value}: {record.error}")
            continue
        report.succeeded += 1
        result = msgpack.unpackb(record.result, raw=False)
        memo_keys = await _keys(store, f"memos/{run}/")
        incarnations = sorted({key.split("/")[0] for key in memo_keys})
        if len(incarnations) != 1:
            problems.append(f"run {run}: memos under {len(incarnations)} incarnations")
            continue
        # Each step's memo at its place (its position, or its branch's first), naming it.
        places = range(1, len(STEPS) + 1)
        positions = [position_key(1, (n,)) if branches else position_key(n) for n in places]
        found = sorted(key.split("/", 1)[1] for key in memo_keys)
        if found != positions:
            problems.append(f"run {run}: memo keys {found}")
            continue
        memo_dir = f"memos/{run}/{incarnations[0]}"
        recorded = [
            PositionedMemo.decode((await store.get(f"{memo_dir}/{p}")).data) for p in positions
        ]
        if [memo.call for memo in recorded] != [Call("step", step) for step in STEPS]:
            problems.append(f"run {run}: memos of {[memo.call for memo in recorded]}")
            continue
        memos = [msgpack.unpackb(memo.value, raw=False) for memo in recorded]
        if result != memos:
            problems.append(f"run {run}: result {result} is not its memos {memos}")
        for step, memo in zip(STEPS, memos, strict=True):
            _check_step(report, run, step, memo, execs, wrote, exists, claiming, deaths)


def _check_step(
    report: CrashReport,
    run: str,
    step: str,
    memo: str,
    execs: dict[tuple[str, str], list[tuple[int, str, str]]],
    wrote: dict[tuple[str, str], list[tuple[int, str]]],
    exists: set[str],
    claiming: dict[tuple[str, str], list[int]],
    deaths: dict[str, int],
) -> None:
    problems = report.problems
    done = execs.get((run, step), [])
    report.executions += len(done)
    winner_pid, winner_token = memo.split(":")[1:]
    winners = [i for i, _, token in done if token == winner_token]
    if len(winners) != 1:
        problems.append(f"run {run} step {step}: the memo {memo} is no logged execution")
        return
    landed = wrote.get((run, step), [])
    if len(landed) > 1 or any(token != winner_token for _, token in landed):
        problems.append(f"run {run} step {step}: memo writes {landed}, memo {memo}")
    # When the memo had certainly landed, as a position in the log: its
    # MEMO-WROTE line, or (killed between the write and the line) the
    # writer's death; with neither (a writer cancelled mid-write), unknown.
    landed_at = landed[0][0] if landed else deaths.get(winner_pid, math.inf)
    report.repeats += len(done) - 1
    for i, pid, token in done:
        if token == winner_token:
            continue
        # The claim this execution ran under began (its CLAIMING line is
        # written before the claim's write) after the memo had landed: its
        # memo scan, which follows the claim, must have found it.
        claimed = [c for c in claiming.get((run, pid), []) if c < i]
        if claimed and claimed[-1] > landed_at:
            problems.append(
                f"run {run} step {step}: executed again by {pid} under a claim made after "
                "its memo had landed (a replay should have returned the memo)"
            )
        died = deaths.get(pid)
        if token in exists or died is None or died < i:
            report.repeats_overlap += 1
        else:
            report.repeats_after_death += 1
