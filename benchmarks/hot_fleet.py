"""Hot single objects in a simulated fleet: a concurrency key and a rate limit
shared by W worker processes, on a bucket that takes one write a second per object.

``python -m benchmarks.hot_fleet [--workers 3,10,30] [--rounds 2] [--out F]``

Every worker process that runs a job type under a concurrency key or a rate
limit writes the same object: the key's slot table (``slots/<digest>``) or
the limit's state (``rates/<digest>``), by compare-and-swap
(stepstone.limits.shared). GCS takes about one write a second per object;
this measures what that does to a fleet (docs/storage.md, "Hot objects").

The fleet is benchmarks/fleet.py's: one S3-like bucket
(:class:`benchmarks.s3_like.S3LikeBucket`, no per-prefix limits here, so the
object's limit is the only one) and W workers in this process, each a
JobRunner on a client of its own (:class:`benchmarks.s3_like.S3LikeStore`:
20 to 60 ms a request, its own retries and its own send rates and hot
objects, as each process has). A submitter puts ``n`` jobs in the queue,
then the workers start and the clock runs until every job succeeded (or
``window`` passed). Two loads:

- **key**: jobs under one concurrency key with a limit of ``LIMIT``, each
  a few memoized steps and a short pause;
- **rate**: jobs under one rate limit of ``RATE`` a second;
- **plain**: the keyed load's jobs without the key (what the queue alone costs).

Each case runs with ``object_writes=1.0`` (a write a second per object,
the rest answered 429) and without (``None``), interleaved. The limit holds
for the hot objects' partitions (``slots``, ``rates``, ``schedules``);
``--every-object`` puts it on every key, as GCS does, where a run's own
queue record, claimed and acked within a second, meets it too; with
``--object-turns`` each client is told so (``S3Store(object_turns=True)``:
every object takes turns).

Reported, besides fleet.py's jobs/s: the runs a second the limit would
allow (the key's: ``LIMIT`` over a run's measured time in its code; the
rate's: ``RATE``); SlowDown/429 answers and lost races (412) on the hot
object per run; the hot objects each process found (each logs one warning
per object) and the processes that found every object limited (one warning
each); the most runs ever in their code at once under the key (never
above ``LIMIT``), and the most starts within any ``per`` of the rate limit
and the rate over the run (never above ``RATE``, bar a start's own delay
after its turn: see :func:`most_within`); how many times each job's code
ran and finished (every job done exactly once); leases lost; and the host's
load average when the case began.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any, ClassVar, Literal

from stepstone import Job, JobContext, JobRunner, RateLimit
from stepstone.runtime.store_queue import StoreQueue
from stepstone.store import MemoryStore, PreconditionFailed
from stepstone.store.s3.throttle import AdaptiveRates

from .cases import CpuTimer, percentile
from .counting import CountingStore, _area
from .fleet import LATENCY, SEED, _backlog, _until_done
from .jobs import bump
from .run import source_commit
from .s3_like import S3LikeBucket, S3LikeStore

LIMIT = 4
"""The concurrency key's limit (load ``key``)."""
RATE = 2
"""The rate limit's runs a second (load ``rate``)."""
PAUSE = 0.3
"""Seconds a keyed run waits after its steps, as a call to another service
would: long enough that the key's limit, not the store, sets the pace
without a per-object limit."""


@dataclass
class Ledger:
    """When each run's code started and ended, by job number: the proof."""

    starts: dict[int, list[float]] = field(default_factory=dict)
    ends: dict[int, list[float]] = field(default_factory=dict)
    intervals: list[tuple[float, float]] = field(default_factory=list)

    def started(self, n: int) -> float:
        now = time.monotonic()
        self.starts.setdefault(n, []).append(now)
        return now

    def ended(self, n: int, began: float) -> None:
        self.ends.setdefault(n, []).append(time.monotonic())
        self.intervals.append((began, time.monotonic()))


_LEDGERS: dict[str, Ledger] = {}
"""Each case's ledger, by its tag (every worker is in this process)."""


class HotJob(Job[int]):
    """A few memoized steps, then ``pause`` seconds, written down in its case's ledger."""

    NAME: ClassVar[str] = "bench.hot"
    n: int
    tag: str
    steps: int = 3
    pause: float = 0.0

    def idempotency_key(self) -> str:
        return f"hot:{self.tag}:{self.n}"

    async def run(self, ctx: JobContext) -> int:
        ledger = _LEDGERS[self.tag]
        began = ledger.started(self.n)
        value = self.n
        for i in range(self.steps):
            value = await ctx.step(f"s{i}", bump, value)
        if self.pause:
            await asyncio.sleep(self.pause)
        ledger.ended(self.n, began)
        return value


class KeyedJob(HotJob):
    """One concurrency key for every run, ``LIMIT`` at a time."""

    NAME: ClassVar[str] = "bench.hot-keyed"
    concurrency_limit: ClassVar[int] = LIMIT

    def concurrency_key(self) -> str:
        return self.tag


class RatedJob(HotJob):
    """Under one rate limit of ``RATE`` starts a second, across the fleet."""

    NAME: ClassVar[str] = "bench.hot-rated"
    rate_limit: ClassVar[RateLimit] = RateLimit(RATE, per=timedelta(seconds=1))


Load = Literal["key", "rate", "plain"]


@dataclass
class HotSpec:
    load: Load
    workers: int
    object_writes: float | None
    n: int = 40
    concurrency: int = 4
    """Jobs each worker runs at a time."""
    steps: int = 3
    window: float = 90.0
    every_object: bool = False
    object_turns: bool = False
    """Each client told the store limits every object (S3Store's ``object_turns``)."""
    """The per-object limit on every key, not only the hot partitions' (HotBucket)."""

    @property
    def label(self) -> str:
        limited = ("1/s-all" if self.every_object else "1/s") if self.object_writes else "none"
        limited += "-turns" if self.object_turns else ""
        return f"{self.load}-w{self.workers}-obj{limited}"


class RaceCountingStore(CountingStore):
    """Counts, by area, the conditional writes refused 412 (a lost race)."""

    def reset(self) -> None:
        super().reset()
        self.lost_races: Counter[str] = Counter()

    async def put_if_absent(self, key: str, data: bytes) -> str:
        try:
            return await super().put_if_absent(key, data)
        except PreconditionFailed:
            self.lost_races[_area(key)] += 1
            raise

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        try:
            return await super().put_if_match(key, data, etag)
        except PreconditionFailed:
            self.lost_races[_area(key)] += 1
            raise

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        try:
            await super().delete(key, if_match=if_match)
        except PreconditionFailed:
            self.lost_races[_area(key)] += 1
            raise


HOT_PARTITIONS = ("slots", "rates", "schedules")
"""Where the objects many processes write live (docs/storage.md, "Hot objects")."""


class HotBucket(S3LikeBucket):
    """An S3LikeBucket whose per-object write limit holds only for the keys
    ``limited`` names: with it on every key, a run's own queue record,
    claimed and acked within a second by its one worker, is refused too
    (``HotSpec.every_object``), which is another matter than the objects
    many processes share."""

    def __init__(self, *args: Any, limited: Callable[[str], bool], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limited = limited

    def _over_object_rate(self, key: str) -> bool:
        return self.limited(key) and super()._over_object_rate(key)


def _hot_key(key: str) -> bool:
    return key.split("/", 1)[0] in HOT_PARTITIONS


def most_overlapping(intervals: Sequence[tuple[float, float]]) -> int:
    """The most intervals open at one time."""
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    most = now = 0
    for _, step in events:  # (an end sorts before a start at the same time)
        now += step
        most = max(most, now)
    return most


def most_within(starts: Sequence[float], span: float) -> int:
    """The most ``starts`` within any ``span`` seconds (half-open). A run's
    code starts a little after its turn (the turn's write is answered, or
    the woken run is claimed again), so two turns ``interval`` apart can
    start closer: this may exceed the limit's by a start or so, its turns
    not."""
    ordered = sorted(starts)
    most = lo = 0
    for hi, at in enumerate(ordered):
        while ordered[lo] <= at - span:
            lo += 1
        most = max(most, hi - lo + 1)
    return most


def _job(spec: HotSpec, n: int, tag: str) -> HotJob:
    if spec.load == "key":
        return KeyedJob(n=n, tag=tag, steps=spec.steps, pause=PAUSE)
    if spec.load == "plain":
        return HotJob(n=n, tag=tag, steps=spec.steps, pause=PAUSE)
    return RatedJob(n=n, tag=tag, steps=spec.steps)


async def hot_fleet(spec: HotSpec) -> dict[str, Any]:
    """Run one case (module docstring); its figures."""
    store = RaceCountingStore(MemoryStore())
    sim = HotBucket(
        store,
        scale=None,
        object_writes=spec.object_writes,
        seed=SEED,
        limited=(lambda key: True) if spec.every_object else _hot_key,
    )
    clients = [
        S3LikeStore(
            sim,
            latency=LATENCY,
            seed=SEED + 10 * n,
            adaptive=AdaptiveRates(object_turns=spec.object_turns),
        )
        for n in range(1 + spec.workers)
    ]
    tag = uuid.uuid4().hex[:8]
    ledger = _LEDGERS[tag] = Ledger()
    kinds = [HotJob, KeyedJob, RatedJob]
    submitter = JobRunner(clients[0], jobs=kinds, queue=StoreQueue(clients[0]))
    runners = [
        JobRunner(c, jobs=kinds, queue=StoreQueue(c), concurrency=spec.concurrency)
        for c in clients[1:]
    ]
    load = os.getloadavg()
    try:
        handles = await _backlog(submitter, [_job(spec, n, tag) for n in range(spec.n)])
        store.reset()
        sim.slowdowns.clear()
        with CpuTimer() as cpu:
            t0 = time.perf_counter()
            for runner in runners:
                await runner.start()
            done = await _until_done(runners, spec.n, spec.window)
            seconds = time.perf_counter() - t0
        slowdowns, races, areas = dict(sim.slowdowns), dict(store.lost_races), store.areas()
        outcomes = await asyncio.gather(*(h.join() for h in handles)) if done == spec.n else []
    finally:
        await asyncio.gather(*(runner.stop() for runner in runners))
        del _LEDGERS[tag]
    return _figures(spec, ledger, runners, clients, done, seconds, cpu, outcomes, load) | {
        "slowdowns_per_run": _per_run(slowdowns, done),
        "lost_races_per_run": _per_run(races, done),
        "writes_per_run": {
            k: round(v / max(done, 1), 2)
            for k, v in areas.items()
            if k.split()[1] in ("slots", "rates") and k.split()[0] in ("CPUT", "PUT", "DELETE")
        },
    }


def _per_run(counts: dict[str, int], done: int) -> dict[str, float]:
    return {k: round(v / max(done, 1), 3) for k, v in sorted(counts.items())}


def _figures(
    spec: HotSpec,
    ledger: Ledger,
    runners: list[JobRunner],
    clients: list[S3LikeStore],
    done: int,
    seconds: float,
    cpu: CpuTimer,
    outcomes: list[Any],
    load: tuple[float, float, float],
) -> dict[str, Any]:
    starts = [t for ts in ledger.starts.values() for t in ts]
    in_code = [b - a for a, b in ledger.intervals]
    out: dict[str, Any] = {
        "label": spec.label,
        "spec": asdict(spec),
        "load_avg": [round(x, 2) for x in load],
        "done": done,
        "seconds": round(seconds, 2),
        "runs_per_s": round(done / seconds, 2),
        "cpu_share": round(cpu.seconds / seconds, 2),
    }
    if spec.load != "rate":
        mean = sum(in_code) / len(in_code) if in_code else 0.0
        out["allowed_runs_per_s"] = round(LIMIT / mean, 2) if mean else None
        out["max_in_code_at_once"] = most_overlapping(ledger.intervals)
        out["limit"] = LIMIT
    else:
        out["allowed_runs_per_s"] = RATE
        out["max_starts_within_1s"] = most_within(starts, 1.0)
        out["max_starts_within_10s"] = most_within(starts, 10.0)
        out["allowed_within_10s"] = RatedJob.rate_limit.most_in(10.0)
        if len(starts) > 1:
            out["rate_over_run"] = round((len(starts) - 1) / (max(starts) - min(starts)), 2)
    ran = Counter({n: len(ts) for n, ts in ledger.starts.items()})
    finished = Counter({n: len(ts) for n, ts in ledger.ends.items()})
    out["code_ran_more_than_once"] = sum(1 for c in ran.values() if c > 1)
    out["finished_exactly_once"] = sum(1 for n in range(spec.n) if finished[n] == 1)
    stats = [r.worker.stats for r in runners]
    out["worker"] = {
        k: sum(getattr(s, k) for s in stats)
        for k in ("claimed", "suspended", "retried", "lost", "queue_errors")
    }
    hot = [sorted(c.send_rates.hot.rates) if c.send_rates else [] for c in clients[1:]]
    out["hot_objects_per_process_max"] = max(len(h) for h in hot)
    out["processes_with_a_hot_object"] = sum(1 for h in hot if h)
    out["hot_objects"] = sorted({k.split("/", 1)[0] for h in hot for k in h})
    out["processes_pacing_every_object"] = sum(
        1 for c in clients[1:] if c.send_rates and c.send_rates.hot.every_object
    )
    waits = [(o.started_at or 0.0) - (o.submitted_at or 0.0) for o in outcomes]
    if waits:
        out["start_wait_p50_s"] = round(percentile(waits, 50), 2)
        out["start_wait_max_s"] = round(max(waits), 2)
    return out


def plan(workers: Sequence[int], n: int, loads: Sequence[Load] = ("key", "rate")) -> list[HotSpec]:
    """Each load at each fleet size, with the object limit and without it:
    one round of it interleaves them."""
    return [
        HotSpec(load, w, writes, n=n) for load in loads for w in workers for writes in (1.0, None)
    ]


SHOWN = (
    "done",
    "seconds",
    "runs_per_s",
    "allowed_runs_per_s",
    "slowdowns_per_run",
    "lost_races_per_run",
    "max_in_code_at_once",
    "max_starts_within_1s",
    "max_starts_within_10s",
    "rate_over_run",
    "hot_objects_per_process_max",
    "processes_with_a_hot_object",
    "processes_pacing_every_object",
    "finished_exactly_once",
    "code_ran_more_than_once",
    "worker",
    "start_wait_p50_s",
    "start_wait_max_s",
    "load_avg",
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="3,10,30")
    parser.add_argument("--n", type=int, default=40, help="jobs a case")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--only",
        default="",
        choices=("", "key", "rate", "plain"),
        help="one load (plain: no limit)",
    )
    parser.add_argument(
        "--every-object", action="store_true", help="the per-object limit on every key"
    )
    parser.add_argument(
        "--object-turns",
        action="store_true",
        help="each client told that every object is limited (S3Store's object_turns)",
    )
    parser.add_argument("--out", default="")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # (the hot-object warnings are counted instead)
    workers = [int(w) for w in options.workers.split(",")]
    loads: tuple[Load, ...] = ("key", "rate")
    if options.only:
        loads = (options.only,)
    specs = plan(workers, options.n, loads)
    for spec in specs:
        spec.every_object = options.every_object
        spec.object_turns = options.object_turns
    commit = source_commit()
    results = []
    for round_ in range(options.rounds):
        for spec in specs:
            result = asyncio.run(hot_fleet(spec)) | {"round": round_, "commit": commit}
            results.append(result)
            shown = {k: result[k] for k in SHOWN if k in result}
            print(spec.label, json.dumps(shown), flush=True)
            if options.out:
                with open(options.out, "w") as f:
                    json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
