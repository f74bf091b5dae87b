"""Pickup and failover with a separate worker process, as a user runs them.

``python -m benchmarks.pickup [--backends sqlite,file,s3] [--idles 0,1,10,60]
[--rounds 3] [--failover] [--out FILE]``

**Pickup.** A ``stepstone worker`` process runs ``benchmarks.pickup_app``
on a fresh store (a SQLite file or a directory under /tmp, or a bucket on a
moto S3 server in a process of its own); this process submits as an API process would (a
runner that runs no worker, opened as it starts) and awaits each result. For each job it
records submit -> start (the job answers the wall-clock time its attempt
began) and submit -> result. The first job is submitted as soon as the
worker logs that it runs ("first"); then, for each idle time, the process
waits that long after the last result before the next submit, and up to a
second more at random (but at idle 0), so that submits do not fall in step
with the worker's looks at the doorbell. Backends
take turns within each round, so a noisy machine weighs on both alike.

**Failover.** A worker runs a job that takes 60 s and is killed with
SIGKILL; a new worker process starts at once, with the same worker id
("same") or another ("other"). The figure is from the kill to the run's
next start.

The results file holds the summaries, every sample and the load average
(1, 5, 15 minutes, as ``uptime`` says) at the start and the end;
``python -m benchmarks.plots FILE`` draws pickup against idle time from it.
Every directory and process made is removed at the end. Figures go to
docs/performance.md with the commit; the history to benchmarks/NOTES.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

from stepstone import JobRunner

from .moto_server import MotoServer
from .pickup_app import JOBS, Held, Started

SAMPLES = {0.0: 10, 1.0: 5}
"""Jobs measured after each idle time; 2 for any other."""


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


class WorkerProcess:
    """``stepstone worker benchmarks.pickup_app:runner`` on ``store``; knows when it runs."""

    def __init__(self, store: str, env: dict[str, str], worker_id: str | None = None) -> None:
        command = [sys.executable, "-m", "stepstone", "worker", "benchmarks.pickup_app:runner"]
        if worker_id is not None:
            command += ["--worker-id", worker_id]
        self.running = threading.Event()
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            command,
            env={**os.environ, **env, "PICKUP_STORE": store},
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            if "worker running" in line:
                self.running.set()

    def wait_running(self, timeout: float = 60.0) -> None:
        if not self.running.wait(timeout):
            raise RuntimeError("the worker did not start:\n" + "".join(self.lines[-20:]))

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


class Backend:
    """Fresh stores of one kind: a SQLite file or a directory under /tmp, or a moto bucket."""

    def __init__(self, name: str, moto: MotoServer | None) -> None:
        self.name = name
        self.moto = moto
        self.dirs: list[str] = []

    def fresh(self) -> tuple[str, dict[str, str]]:
        if self.name in ("file", "sqlite"):
            root = tempfile.mkdtemp(prefix="stepstone-pickup-", dir="/tmp")
            self.dirs.append(root)
            if self.name == "file":
                return root, {}
            path = os.path.join(root, "jobs.db")
            open(path, "wb").close()  # (an empty file is an empty store)
            return path, {}
        assert self.moto is not None
        bucket = f"pickup-{uuid.uuid4().hex[:12]}"
        self.moto.create_bucket(bucket)
        return f"s3://{bucket}/bench", {"AWS_ENDPOINT_URL_S3": self.moto.url}

    def clean(self) -> None:
        for root in self.dirs:
            shutil.rmtree(root, ignore_errors=True)


async def _one(api: JobRunner, n: int) -> tuple[float, float, float]:
    """Submit one job and await it: (submit -> start, submit -> result, the
    submit's own time) in seconds."""
    submitted = time.time()
    handle = await api.submit(Started(n=n))
    returned = time.time()
    began = await handle
    return began - submitted, time.time() - submitted, returned - submitted


async def pickup_round(backend: Backend, idles: list[float]) -> dict[str, list[list[float]]]:
    """One worker's life: the first job, then jobs after each idle time."""
    store, env = backend.fresh()
    os.environ.update(env)
    worker = WorkerProcess(store, env)
    out: dict[str, list[list[float]]] = {}
    api = JobRunner(store, jobs=JOBS)
    try:
        await api.open()  # as an API process does as it starts (its lifespan)
        await asyncio.to_thread(worker.wait_running)
        out["first"] = [list(await _one(api, 0))]
        n = 1
        for idle in idles:
            samples = []
            for _ in range(SAMPLES.get(idle, 2)):
                # Submits come at random moments, not in step with the
                # worker's looks: up to a second more than the idle time.
                await asyncio.sleep(idle + (random.random() if idle else 0.0))
                samples.append(list(await _one(api, n)))
                n += 1
            out[f"idle {idle:g}s"] = samples
    finally:
        await api.close()
        worker.stop()
    return out


async def failover_round(backend: Backend, same: bool) -> float:
    """Seconds from the SIGKILL of a worker running a job to the job's next start."""
    store, env = backend.fresh()
    os.environ.update(env)
    marks = os.path.join(tempfile.mkdtemp(prefix="stepstone-failover-", dir="/tmp"), "starts")
    backend.dirs.append(os.path.dirname(marks))
    first = WorkerProcess(store, env, worker_id="bench-a")
    api = JobRunner(store, jobs=JOBS)
    second: WorkerProcess | None = None
    try:
        await asyncio.to_thread(first.wait_running)
        await api.submit(Held(path=marks, seconds=60.0))
        await _until(lambda: _starts(marks) >= 1, 60.0)
        killed = time.time()
        first.kill()
        second = WorkerProcess(store, env, worker_id="bench-a" if same else "bench-b")
        await _until(lambda: _starts(marks) >= 2, 120.0)
        return _second_start(marks) - killed
    finally:
        await api.close()
        first.kill()
        if second is not None:
            second.kill()


def _starts(path: str) -> int:
    try:
        with open(path, encoding="utf-8") as lines:
            return len(lines.read().splitlines())
    except FileNotFoundError:
        return 0


def _second_start(path: str) -> float:
    with open(path, encoding="utf-8") as lines:
        return float(lines.read().splitlines()[1].split()[0])


async def _until(condition: Any, limit: float) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the condition was not met in time")
        await asyncio.sleep(0.01)


def summary(samples: list[float]) -> dict[str, float]:
    ms = [s * 1e3 for s in samples]
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 1),
        "p99_ms": round(_percentile(ms, 99), 1),
        "max_ms": round(max(ms), 1),
    }


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


async def main(args: argparse.Namespace) -> dict[str, Any]:
    names = args.backends.split(",")
    idles = [float(x) for x in args.idles.split(",")]
    load_at_start = [round(x, 2) for x in os.getloadavg()]  # as uptime says: 1, 5, 15 min
    moto = MotoServer() if "s3" in names else None
    if moto is not None:
        moto.__enter__()
    backends = [Backend(name, moto) for name in names]
    pickups: dict[str, dict[str, list[list[float]]]] = {name: {} for name in names}
    failovers: dict[str, list[float]] = {}
    try:
        for r in range(args.rounds):
            order = backends if r % 2 == 0 else backends[::-1]
            for backend in order:
                if args.failover:
                    for same in (True, False):
                        key = f"{backend.name} {'same' if same else 'other'} id"
                        seconds = await failover_round(backend, same)
                        failovers.setdefault(key, []).append(seconds)
                        print(json.dumps({"failover": key, "seconds": round(seconds, 3)}))
                else:
                    got = await pickup_round(backend, idles)
                    for case, samples in got.items():
                        pickups[backend.name].setdefault(case, []).extend(samples)
                    print(json.dumps({"backend": backend.name, "round": r, **got}))
    finally:
        for backend in backends:
            backend.clean()
        if moto is not None:
            moto.__exit__()
    result: dict[str, Any] = {
        "commit": commit(),
        "rounds": args.rounds,
        "load": {"start": load_at_start, "end": [round(x, 2) for x in os.getloadavg()]},
    }
    if args.failover:
        result["failover_s"] = {k: [round(v, 2) for v in vs] for k, vs in failovers.items()}
    else:
        result["pickup"] = {
            name: {
                case: {
                    "start": summary([s[0] for s in samples]),
                    "result": summary([s[1] for s in samples]),
                    "submit": summary([s[2] for s in samples]),
                }
                for case, samples in cases.items()
            }
            for name, cases in pickups.items()
        }
        # Every sample, [submit -> start, submit -> result, the submit] in
        # seconds, so plots and other percentiles come from the file.
        result["samples"] = {
            name: {
                case: [[round(x, 5) for x in s] for s in samples] for case, samples in cases.items()
            }
            for name, cases in pickups.items()
        }
    return result


def _table(result: dict[str, Any]) -> str:
    rows = []
    if "pickup" in result:
        rows.append(
            "| store | when | n | submit -> start p50 / p99 ms "
            "| submit -> result p50 / p99 ms | the submit p50 ms |"
        )
        rows.append("|---|---|---|---|---|---|")
        for name, cases in result["pickup"].items():
            for case, figures in cases.items():
                s, r, u = figures["start"], figures["result"], figures["submit"]
                rows.append(
                    f"| {name} | {case} | {s['n']} | {s['p50_ms']} / {s['p99_ms']} "
                    f"| {r['p50_ms']} / {r['p99_ms']} | {u['p50_ms']} |"
                )
    for key, seconds in result.get("failover_s", {}).items():
        rows.append(f"failover {key}: {seconds} s (median {statistics.median(seconds):.2f})")
    return "\n".join(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,file,s3")
    parser.add_argument("--idles", default="0,1,10,60")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--failover", action="store_true")
    parser.add_argument("--out")
    options = parser.parse_args()
    figures = asyncio.run(main(options))
    print(_table(figures))
    if options.out:
        with open(options.out, "w", encoding="utf-8") as out:
            json.dump(figures, out, indent=1)
