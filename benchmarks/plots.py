"""The figures of docs/performance.md, drawn from ``benchmarks.run --out`` results."""

from __future__ import annotations

import os
from typing import Any


def draw(results: list[dict[str, Any]], directory: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    by_label = {r.get("label"): r for r in results if "error" not in r}
    written: list[str] = []

    scale = sorted(
        (r for r in by_label.values() if r["case"] == "scale"), key=lambda r: r["processes"]
    )
    if scale:
        fig, ax = plt.subplots(figsize=(5, 3.5))
        procs = [r["processes"] for r in scale]
        rates = [r["jobs_per_s"] for r in scale]
        ax.plot(procs, rates, "o-", label="measured")
        ax.plot(procs, [rates[0] * p for p in procs], ":", color="grey", label="linear")
        ax.set_xlabel("worker processes (one FileStore)")
        ax.set_ylabel("W3 jobs/s")
        ax.set_xticks(procs)
        ax.set_title(f"W3, N={scale[0]['n']}, durable FileStore + StoreQueue")
        ax.legend()
        ax.grid(alpha=0.3)
        written.append(_save(fig, plt, directory, "jobs_per_s_vs_processes.png"))

    rows = [
        r
        for r in by_label.values()
        if r["case"] == "w3"
        and r.get("keyed") is not False
        and r["backend"] in ("s3", "file")
        and str(r.get("label", "")).startswith(("w3-", "steps"))
    ]
    if rows:
        fig, ax = plt.subplots(figsize=(5.5, 3.8))
        for backend, style in (("s3", "-"), ("file", "--")):
            points = sorted(
                (r["steps"], r["requests_per_job"]) for r in rows if r["backend"] == backend
            )
            if not points:
                continue
            steps = [p[0] for p in points]
            writes = [p[1]["PUT"] + p[1]["CPUT"] + p[1]["LIST"] for p in points]
            reads = [p[1]["GET"] + p[1]["HEAD"] for p in points]
            ax.plot(steps, writes, "o" + style, label=f"{backend}: PUT-class (PUT, CPUT, LIST)")
            ax.plot(steps, reads, "s" + style, label=f"{backend}: GET-class (GET, HEAD)")
        ax.set_xlabel("memoized steps per job")
        ax.set_ylabel("store requests per job")
        ax.set_title("W3 requests per job against steps per job")
        ax.set_xticks([1, 3, 10])
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        written.append(_save(fig, plt, directory, "requests_per_job_vs_steps.png"))
    written += _fleet(plt, list(by_label.values()), directory)
    written += _throttling(plt, results, directory)
    return written


def _throttling(plt: Any, results: list[dict[str, Any]], directory: str) -> list[str]:
    """Jobs/s and SlowDown answers per job against the workers of the
    simulated fleet at a tenth of S3's limits (``fleet*-limits``), one curve
    per ``version`` of the results (each a commit's median runs)."""
    curves: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(results, key=lambda r: r.get("workers", 0)):
        limited = r.get("case") == "fleet" and str(r.get("label", "")).endswith("-limits")
        if limited and "version" in r and "error" not in r:
            commit = str(r.get("commit", ""))[:7]
            name = r["version"] if commit in r["version"] else f"{commit}: {r['version']}"
            curves.setdefault(name, []).append(r)
    if len(curves) < 2:
        return []
    fig, (jobs, slowdowns) = plt.subplots(1, 2, figsize=(10, 4))
    for version, rows in curves.items():
        workers = [r["workers"] for r in rows]
        jobs.plot(workers, [r["jobs_per_s"] for r in rows], "o-", label=version)
        slowdowns.plot(workers, [max(r["slowdowns_per_job"], 0.001) for r in rows], "o-")
    jobs.set_ylabel("W3 jobs/s")
    slowdowns.set_ylabel("SlowDown answers per job (0 drawn at 0.001)")
    slowdowns.set_yscale("log")
    slowdowns.axhline(0.1, color="grey", linestyle=":")
    for ax in (jobs, slowdowns):
        ax.set_xscale("log")
        ax.set_xticks([1, 10, 100], ["1", "10", "100"])
        ax.set_xlabel("workers, each a process of its own (4 jobs at a time)")
        ax.grid(alpha=0.3, which="both")
    jobs.legend(fontsize=7)
    fig.suptitle("Simulated fleet, backlog, S3's per-prefix limits / 10", fontsize=10)
    return [_save(fig, plt, directory, "fleet_throttling_vs_workers.png")]


FLEET_LOADS = {
    "": "StoreQueue, backlog",
    "-limits": "StoreQueue, backlog, S3 limits / 10",
    "-stream": "StoreQueue, 8 jobs/s",
    "-sqs": "SqsQueue, backlog",
    "-sqs-stream": "SqsQueue, 8 jobs/s",
}
"""The fleet's loads, by the suffix of their case (benchmarks/run.py)."""


def _fleet(plt: Any, results: list[dict[str, Any]], directory: str) -> list[str]:
    """Jobs/s, and requests per job by operation (the submits' included),
    against the number of workers of the simulated fleet (benchmarks/fleet.py)."""
    curves: dict[str, list[dict[str, Any]]] = {}
    for r in sorted((r for r in results if r["case"] == "fleet"), key=lambda r: r["workers"]):
        load = str(r.get("label", "")).split(f"fleet{r['workers']}", 1)[-1]
        curves.setdefault(load, []).append(r)
    if not curves:
        return []
    loads = [load for load in FLEET_LOADS if load in curves]

    fig, ax = plt.subplots(figsize=(6, 4))
    for load in loads:
        rows = curves[load]
        workers = [r["workers"] for r in rows]
        ax.plot(workers, [r["jobs_per_s"] for r in rows], "o-", label=FLEET_LOADS[load])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("workers (4 jobs at a time each)")
    ax.set_ylabel("W3 jobs/s")
    ax.set_title("Simulated fleet, 20-60 ms a request")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    written = [_save(fig, plt, directory, "fleet_jobs_per_s_vs_workers.png")]

    columns = min(3, len(loads))
    lines = -(-len(loads) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(4 * columns, 3.4 * lines), squeeze=False)
    for ax, load in zip(axes.flat, loads, strict=False):
        rows = curves[load]
        billed = [_billed(r) for r in rows]
        for op in sorted({op for b in billed for op, v in b.items() if v >= 0.05}):
            ax.plot([r["workers"] for r in rows], [b.get(op, 0.0) for b in billed], "o-", label=op)
        ax.set_xscale("log")
        ax.set_xlabel("workers")
        ax.set_title(FLEET_LOADS[load], fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(loads) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("requests per W3 job")
    written.append(_save(fig, plt, directory, "fleet_requests_per_job_vs_workers.png"))
    return written


SQS_NAMES = {
    "receive_message": "SQS Receive",
    "send_message_batch": "SQS SendBatch",
    "delete_message_batch": "SQS DeleteBatch",
    "change_message_visibility": "SQS ChangeVisibility",
}


def _billed(r: dict[str, Any]) -> dict[str, float]:
    """Every request a job cost by operation, its submit's included (a
    backlog's were counted apart); SQS's beside the bucket's."""
    total: dict[str, float] = {}
    for key, names in (
        ("requests_per_job", {}),
        ("submit_requests_per_job", {}),
        ("sqs_requests_per_job", SQS_NAMES),
        ("submit_sqs_requests_per_job", SQS_NAMES),
    ):
        for op, value in r.get(key, {}).items():
            name = names.get(op, f"SQS {op}" if names else op)
            total[name] = total.get(name, 0.0) + float(value)
    return total


PICKUP_TARGETS = {"file": (20.0, 100.0), "s3": (500.0, 1500.0)}
"""Issue 29's submit -> start targets, p50 and p99 in milliseconds."""


def draw_pickup(results: list[dict[str, Any]], directory: str) -> list[str]:
    """Submit -> start against the idle time before the submit, one panel
    per store of each ``benchmarks.pickup --out`` file: every sample as a
    dot, the p50 and p99 of each idle time as lines, the targets dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    os.makedirs(directory, exist_ok=True)
    panels = [(r, n) for r in results for n in ("file", "s3") if n in r.get("pickup", {})]
    if not panels:
        return []
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8), squeeze=False)
    for ax, (result, name) in zip(axes[0], panels, strict=True):
        cases = list(result["pickup"][name])  # "first", then "idle 0s", "idle 1s", ...
        x = list(range(len(cases)))
        for i, case in enumerate(cases):
            starts = [s[0] * 1e3 for s in result.get("samples", {}).get(name, {}).get(case, [])]
            ax.plot([i] * len(starts), starts, ".", color="grey", alpha=0.4)
        for q, style in (("p50_ms", "o-"), ("p99_ms", "s--")):
            ax.plot(x, [result["pickup"][name][c]["start"][q] for c in cases], style, label=q[:3])
        for target, colour in zip(PICKUP_TARGETS[name], ("tab:blue", "tab:orange"), strict=True):
            ax.axhline(target, color=colour, linestyle=":", linewidth=1)
        ax.set_xticks(x, [c.replace("idle ", "idle\n") for c in cases])
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_ylabel("submit -> start, ms")
        ax.set_title(f"{'files' if name == 'file' else 'S3 (moto)'}, at {result['commit']}")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle("pickup by a separate worker process against idle time (targets dotted)")
    return [_save(fig, plt, directory, "pickup_vs_idle.png")]


def _save(fig: Any, plt: Any, directory: str, name: str) -> str:
    fig.tight_layout()
    path = os.path.join(directory, name)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main() -> None:
    """``python -m benchmarks.plots results.json [more.json ...]``: draw
    docs/img/*.png (a ``benchmarks.pickup`` file draws pickup_vs_idle.png)."""
    import json
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    directory = os.path.join(here, "..", "docs", "img")
    results: list[dict[str, Any]] = []
    pickups: list[dict[str, Any]] = []
    for path in sys.argv[1:]:
        with open(path) as f:
            loaded = json.load(f)
        if isinstance(loaded, dict) and "pickup" in loaded:  # benchmarks.pickup's file
            pickups.append(loaded)
        else:
            results.extend(loaded)
    written = draw_pickup(pickups, directory) if pickups else []
    if results:
        written += draw(results, directory)
    for path in written:
        print(f"wrote {os.path.normpath(path)}")


if __name__ == "__main__":
    main()
