"""Run the benchmarks: ``python -m benchmarks.run [--quick] [--only a,b] [--out FILE] [--plots]``.

Every case runs in a fresh interpreter (so peak RSS is the case's own), prints
one JSON line as it finishes, and at the end a Markdown table. ``--out``
also writes the list of results as JSON, each result with the commit it
measured (``commit``); ``--plots`` draws docs/img/*.png from them (needs the
``bench`` extra: matplotlib). See docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, fields
from typing import Any

from .cases import Spec, empty_trash, run_one
from .counting import OPERATIONS


def plan(quick: bool) -> dict[str, Spec]:
    """Every case by id. ``--quick`` shrinks N so the lot runs in well under a minute."""
    q = quick
    n_mem, n_file, n_s3, n_scale = (200, 100, 10, 200) if q else (1000, 1000, 50, 1000)
    cases: dict[str, Spec] = {
        "w3-memory": Spec("w3", "memory", n_mem),
        "w3-memory-sq": Spec("w3", "memory-sq", n_mem),
        "w3-file": Spec("w3", "file", n_file),
        "w3-sqlite": Spec("w3", "sqlite", n_file),
        "w3-sqlite-normal": Spec("w3", "sqlite-normal", n_file),
        "w3-s3": Spec("w3", "s3", n_s3),
        "w3-s3-unkeyed": Spec("w3", "s3", n_s3, keyed=False, resubmit=False),
        # Fleet-wide limits (docs/concepts.md): each run its own concurrency
        # key, one key shared by all (limit = concurrency), one key with a
        # limit of 8 (most runs wait in its line), a rate limit no run waits
        # for. Compare with the plain case in one run.
        "w3-memory-sq-ckey": Spec("w3", "memory-sq", n_mem, limit="own-key"),
        "w3-memory-sq-shared": Spec("w3", "memory-sq", n_mem, limit="shared-key"),
        "w3-memory-sq-line": Spec("w3", "memory-sq", n_mem, limit="line"),
        "w3-memory-sq-rate": Spec("w3", "memory-sq", n_mem, limit="rate"),
        "w3-file-ckey": Spec("w3", "file", n_file, limit="own-key"),
        "w3-file-shared": Spec("w3", "file", n_file, limit="shared-key"),
        "w3-file-rate": Spec("w3", "file", n_file, limit="rate"),
        "w3-s3-ckey": Spec("w3", "s3", n_s3, limit="own-key"),
        "w3-s3-rate": Spec("w3", "s3", n_s3, limit="rate"),
        "latency-memory": Spec("latency", "memory", 50 if q else 1000),
        "latency-file": Spec("latency", "file", 20 if q else 200),
        "latency-sqlite": Spec("latency", "sqlite", 20 if q else 200),
        # Submit, then await, one job at a time from a runner with no worker
        # (an API process), a worker in another runner on the same store: the
        # handle polls for the outcome; its reads are in the counts.
        "latency-memory-sq-api": Spec("latency", "memory-sq", 10 if q else 40, api=True),
        "latency-s3-api": Spec("latency", "s3", 5 if q else 20, api=True),
        "scale-1": Spec("scale", "file", n_scale, processes=1),
        "scale-2": Spec("scale", "file", n_scale, processes=2),
        "scale-4": Spec("scale", "file", n_scale, processes=4),
        "scale-sqlite-1": Spec("scale", "sqlite", n_scale, processes=1),
        "scale-sqlite-2": Spec("scale", "sqlite", n_scale, processes=2),
        "scale-sqlite-4": Spec("scale", "sqlite", n_scale, processes=4),
        # 4,000 jobs: 4 x 64 in flight is a quarter of 1,000, so at N=1,000
        # the ramp up and the last batches weigh as much as the steady state.
        "scale4k-1": Spec("scale", "file", 4 * n_scale, processes=1),
        "scale4k-2": Spec("scale", "file", 4 * n_scale, processes=2),
        "scale4k-4": Spec("scale", "file", 4 * n_scale, processes=4),
        # A backlog of jobs that take 0.1 s (16 at a time per process) and 20
        # at priority 0 submitted behind it: how long do they wait?
        "urgent-2": Spec(
            "scale", "file", 2 * n_scale, processes=2, concurrency=16, pause=0.1, urgent=20
        ),
        "retry1-file": Spec("w3", "file", n_file, fail_first=1, resubmit=False),
        "retry1-file-nohistory": Spec(
            "w3", "file", n_file, fail_first=1, resubmit=False, history=False
        ),
        "w3-memory-metrics": Spec("w3", "memory", n_mem, metrics=True),
        "steps10-memory-metrics": Spec(
            "w3", "memory", n_mem, steps=10, resubmit=False, metrics=True
        ),
        # W3 as the peers' benchmarks run it: each submit awaited before the
        # next (benchmarks/peers.py); huey and DBOS on SQLite beside stepstone.
        "w3seq-memory": Spec("w3seq", "memory", n_mem),
        "w3seq-memory-sq": Spec("w3seq", "memory-sq", n_mem),
        "w3seq-file": Spec("w3seq", "file", n_file),
        "w3seq-sqlite": Spec("w3seq", "sqlite", n_file),
        "w3seq-sqlite-normal": Spec("w3seq", "sqlite-normal", n_file),
        "w3seq-huey": Spec("peer", "huey", n_file),
        "w3seq-dbos": Spec("peer", "dbos", n_file),
        # runner.submit_many of N jobs in one call, no worker running meanwhile
        "many-file": Spec("many", "file", 1000 if q else 10000),
        "many-sqlite": Spec("many", "sqlite", 1000 if q else 10000),
        "many-memory": Spec("many", "memory", 1000 if q else 10000),
        "many-s3": Spec("many", "s3", n_s3),
        # W3 from 1, 4 and 16 submitters at once on moto's S3, with the worker
        # in the submitting process and (-api) in another runner: requests
        # per job by operation, and the submits' latency.
        **{
            f"subs{k}-s3{'-api' if api else ''}": Spec(
                "submitters", "s3", 8 if q else 48, submitters=k, api=api
            )
            for k in (1, 4, 16)
            for api in (False, True)
        },
        "steps1-memory": Spec("w3", "memory", n_mem, steps=1, resubmit=False),
        "steps10-memory": Spec("w3", "memory", n_mem, steps=10, resubmit=False),
        "n10k-memory": Spec("w3", "memory", 2000 if q else 10000, resubmit=False),
        "steps1-file": Spec("w3", "file", n_file, steps=1, resubmit=False),
        "steps10-file": Spec("w3", "file", n_file, steps=10, resubmit=False),
        "n10k-file": Spec("w3", "file", 300 if q else 10000, resubmit=False),
        "steps1-s3": Spec("w3", "s3", n_s3, steps=1, resubmit=False),
        "steps10-s3": Spec("w3", "s3", n_s3, steps=10, resubmit=False),
        # A simulated fleet (benchmarks/fleet.py): W workers, 4 jobs at a time
        # each, on an S3-like bucket: a backlog, with S3's per-prefix limits
        # at a tenth or none; and 8 submits a second (one worker's capacity
        # is about 10 jobs a second), no limits. StoreQueue workers, and
        # SqsQueue consumers on moto's SQS (-sqs).
        **{
            f"fleet{w}{suffix}": Spec(
                "fleet",
                "s3like-sqs" if "-sqs" in suffix else "s3like",
                n,
                concurrency=4,
                workers=w,
                limit_scale=scale,
                rate=rate,
                window=90.0,
            )
            for w in (1, 10, 100)
            for suffix, scale, rate, n in (
                ("", 0.0, 0.0, (20 if q else 200) * {1: 1, 10: 5, 100: 10}[w]),
                ("-limits", 0.1, 0.0, (20 if q else 200) * {1: 1, 10: 5, 100: 10}[w]),
                ("-stream", 0.0, 8.0, 16 if q else 160),
                ("-sqs", 0.0, 0.0, (20 if q else 100) * {1: 1, 10: 2, 100: 4}[w]),
                ("-sqs-stream", 0.0, 8.0, 16 if q else 160),
            )
        },
        # The fleet of 100 at a tenth of S3's limits on a bucket that also takes
        # one write a second to each object (GCS), each client told so.
        "fleet100-limits-every": Spec(
            "fleet",
            "s3like",
            200 if q else 2000,
            concurrency=4,
            workers=100,
            limit_scale=0.1,
            object_writes=1.0,
            window=90.0,
        ),
        # A run's stream read from another process: write-to-reader latency,
        # requests per item and per reader-second (benchmarks/streams.py).
        "stream-file": Spec("stream", "file", 20 if q else 200, pause=0.1, window=2 if q else 20),
        "stream-s3": Spec("stream", "s3", 20 if q else 200, pause=0.1, window=2 if q else 20),
        # What waiting costs: N runs asleep, watched for `window` seconds a phase.
        "suspended-file": Spec("suspended", "file", 100 if q else 2000, window=5 if q else 30),
        "suspended-s3": Spec("suspended", "s3", 20 if q else 200, window=5 if q else 30),
    }
    for case_id, spec in cases.items():
        spec.label = case_id
    return cases


def source_commit() -> str | None:
    """The commit the harness and the engine are checked out at, ``+dirty`` if
    either has changes not committed; None outside a git checkout."""
    here = os.path.dirname(os.path.abspath(__file__))

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=here, capture_output=True, text=True, check=True, timeout=30
        )
        return done.stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--", "../src", ".")
    except (OSError, subprocess.SubprocessError):
        return None
    changed_code = [line for line in changed.splitlines() if not line.endswith(".json")]
    return head + ("+dirty" if changed_code else "")


def run_in_subprocess(spec: Spec) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.run", "--one", json.dumps(asdict(spec))]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return {"name": spec.name(), "error": proc.stderr.strip()[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
    return str(value)


def table(results: list[dict[str, Any]]) -> str:
    head = ["case", "N", "steps", "jobs/s", "jobs/CPU-s", "steps/s", "p50 ms", "p99 ms"]
    head += ["submit p50 ms", "RSS MB"]
    head += [f"{op}/job" for op in OPERATIONS] + ["R jobs/s", "R req/job", "load"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['name']} | error: {r['error'].splitlines()[-1][:80]} |")
            continue
        req = r.get("requests_per_job", {})
        rreq = r.get("r_requests_per_job")
        row = [
            r["name"],
            r["n"],
            r["steps"],
            r.get("jobs_per_s"),
            r.get("jobs_per_cpu_s"),
            r.get("steps_per_s"),
            r.get("p50_ms"),
            r.get("p99_ms"),
            r.get("submit_p50_ms"),
            r.get("peak_rss_mb") if r["case"] != "scale" else r.get("worker_peak_rss_mb"),
        ]
        row += [req.get(op) for op in OPERATIONS]
        row += [r.get("r_jobs_per_s"), None if rreq is None else round(sum(rreq.values()), 3)]
        row += [r.get("load_before")]
        lines.append("| " + " | ".join(_fmt(v) for v in row) + " |")
    return "\n".join(lines)


def _requests(counts: dict[str, Any]) -> str:
    """``LIST 12, GET 3``: the non-zero counts, in OPERATIONS order (or by area)."""
    keys = [op for op in OPERATIONS if op in counts] or sorted(counts)
    return ", ".join(f"{k} {_fmt(counts[k])}" for k in keys if counts[k]) or "none"


def suspended_table(results: list[dict[str, Any]]) -> str:
    """What waiting costs: requests a minute with an empty queue, with N runs
    asleep, in a process started on them (its first window, then the next);
    and the requests of one run from its submit to its sleep (``suspend``),
    from its wake time to its end (``resume``), of a run waiting for an
    event looking again (``recheck``), and of one send_event."""
    phases = ["idle", "sleeping", "started", "started_later"]
    once = ["suspend", "resume", "recheck", "send_event"]
    head = ["case", "N", *(f"{p} /min" for p in phases), *once]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['name']} | error: {r['error'].splitlines()[-1][:80]} |")
            continue
        row = [r["name"], str(r["n"]), *(_requests(r[f"{p}_per_minute"]) for p in phases)]
        row += [_requests(r[k]) for k in once]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small N: a smoke run")
    parser.add_argument("--only", default="", help="comma-separated case ids (default: all)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per case; the median is kept")
    parser.add_argument("--out", default="", help="write the results as JSON here")
    parser.add_argument("--plots", action="store_true", help="draw docs/img/*.png")
    parser.add_argument("--workdir", default="", help="where file stores go (default: $TMPDIR)")
    parser.add_argument(
        "--keep-trash",
        action="store_true",
        help="leave the case stores in WORKDIR/stepstone-bench-trash (delete them later:"
        " on ext4 without a journal a mass delete slows file creation for minutes)",
    )
    parser.add_argument("--list", action="store_true", help="list the case ids and exit")
    parser.add_argument("--one", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.one:
        known = {f.name for f in fields(Spec)}
        spec = Spec(**{k: v for k, v in json.loads(args.one).items() if k in known})
        print(json.dumps(run_one(spec)), flush=True)
        return 0

    cases = plan(args.quick)
    if args.list:
        print("\n".join(cases))
        return 0
    wanted = [c for c in args.only.split(",") if c] or list(cases)
    unknown = [c for c in wanted if c not in cases]
    if unknown:
        parser.error(f"unknown case(s): {', '.join(unknown)}; --list shows them")
    results: list[dict[str, Any]] = []
    commit = source_commit()
    started = time.monotonic()
    # Repeats go round the cases (a, b, a, b, ...), so that the machine's
    # load, which drifts over minutes here, weighs on every case alike.
    runs: dict[str, list[dict[str, Any]]] = {case_id: [] for case_id in wanted}
    for _ in range(max(1, args.repeat)):
        for case_id in wanted:
            cases[case_id].workdir = args.workdir
            runs[case_id].append(run_in_subprocess(cases[case_id]))
            print(json.dumps(runs[case_id][-1]), file=sys.stderr, flush=True)
    for case_id in wanted:
        good = [r for r in runs[case_id] if "error" not in r]
        if good:
            median = statistics.median_low(r.get("jobs_per_s", 0.0) for r in good)
            result = next(r for r in good if r.get("jobs_per_s", 0.0) == median)
            if len(good) > 1:
                result["jobs_per_s_runs"] = [r.get("jobs_per_s") for r in good]
        else:
            result = runs[case_id][0]
        result["commit"] = commit
        results.append(result)
        print(json.dumps(result), flush=True)
    if not args.keep_trash:
        empty_trash(args.workdir)
    print()
    print(table([r for r in results if r.get("case") != "suspended"]))
    waits = [r for r in results if r.get("case") == "suspended"]
    if waits:
        print()
        print(suspended_table(waits))
    print(f"\n({len(results)} cases in {time.monotonic() - started:.0f}s)", file=sys.stderr)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    if args.plots:
        from .plots import draw

        for path in draw(results, os.path.join(os.path.dirname(__file__), "..", "docs", "img")):
            print(f"wrote {path}", file=sys.stderr)
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
