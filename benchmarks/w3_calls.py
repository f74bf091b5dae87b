"""Where a W3 job's Python calls go: cProfile's call counts, per job.

    python -m benchmarks.w3_calls            # W3 at 200 and 600 jobs, differenced
    python -m benchmarks.w3_calls --top 60

Runs ``benchmarks.w3_instructions`` under cProfile in two fresh processes,
at 200 and at 600 jobs, and prints (calls(600) - calls(200)) / 400 for each
function: the difference takes out the interpreter's start and the imports,
so what is left is what one more job costs. Call counts, like callgrind's
instructions, do not depend on the machine's load; they say *where* the
instructions of ``w3_instructions`` go, not how many there are.
(``benchmarks.profile`` shows where one run's time goes, setup and all.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

_PROFILE = """
import cProfile, json, pstats, re, runpy, sys
sys.argv = ["w3", "{jobs}"]
profile = cProfile.Profile()
profile.enable()
runpy.run_module("benchmarks.w3_instructions", run_name="__main__")
profile.disable()
counts = {{}}
for (path, line, name), (_, calls, *_rest) in pstats.Stats(profile).stats.items():
    where = re.sub(r".*/lib/python3[.][0-9]+/", "", path.split("/src/")[-1])
    counts[f"{{where}}:{{line}} {{name}}"] = calls
print(json.dumps(counts))
"""


def call_counts(jobs: int) -> dict[str, int]:
    """Each function's calls in a W3 run of ``jobs`` jobs, in a fresh process."""
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", _PROFILE.format(jobs=jobs)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    counts: dict[str, int] = json.loads(done.stdout.strip().splitlines()[-1])
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=40, help="functions to print")
    args = parser.parse_args()
    small, large = call_counts(200), call_counts(600)
    per_job = {key: (large.get(key, 0) - small.get(key, 0)) / 400 for key in small | large}
    print(f"Python-level calls a job: {sum(per_job.values()):,.0f}")
    for key, calls in sorted(per_job.items(), key=lambda item: -item[1])[: args.top]:
        print(f"{calls:8.1f}  {key}")


if __name__ == "__main__":
    main()
