"""The two figures of docs/performance.md, drawn from ``benchmarks.run --out`` results."""

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
        fig.tight_layout()
        path = os.path.join(directory, "jobs_per_s_vs_processes.png")
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)

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
        fig.tight_layout()
        path = os.path.join(directory, "requests_per_job_vs_steps.png")
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written


def main() -> None:
    """``python -m benchmarks.plots results.json [more.json ...]``: draw docs/img/*.png."""
    import json
    import sys

    results: list[dict[str, Any]] = []
    for path in sys.argv[1:]:
        with open(path) as f:
            results.extend(json.load(f))
    here = os.path.dirname(os.path.abspath(__file__))
    for path in draw(results, os.path.join(here, "..", "docs", "img")):
        print(f"wrote {os.path.normpath(path)}")


if __name__ == "__main__":
    main()
