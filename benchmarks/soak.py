"""The crash soak: tests/reliability's crash test, bigger and longer.

Worker processes over one FileStore + StoreQueue are SIGKILLed at random
moments (by their own hooks inside a step, around memo and outcome writes and
right after a claim, and by this process at random times) and restarted until
every job has finished; then the store and the shared event log are audited:
every job has exactly one outcome, none is lost, every memo was written once
and is the first writer's, and a step ran again only when its memo had not
landed.

    python benchmarks/soak.py            # 5000 jobs, 4 workers: about 5 minutes on 2 cores
    python benchmarks/soak.py --jobs 20000 --workers 6 --keep /tmp/soak

Exits 1 if the audit found anything. Prints one line of figures (and writes
them as JSON with ``--json PATH``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "reliability"), str(ROOT / "src")]

from rel_crash import DEFAULT_KILLS, run_crash  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--kills", default=DEFAULT_KILLS, help="point=probability,...")
    parser.add_argument(
        "--parent-kill-every", default="0.5,2.0", help="seconds between the parent's kills, lo,hi"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--deadline", type=float, default=1800.0)
    parser.add_argument("--keep", type=Path, help="run in this directory and keep it")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    lo, hi = (float(x) for x in args.parent_kill_every.split(","))

    async def soak(base: Path) -> int:
        report = await run_crash(
            base,
            jobs=args.jobs,
            workers=args.workers,
            concurrency=args.concurrency,
            lease=args.lease,
            kill_spec=args.kills,
            parent_kill_every=(lo, hi),
            seed=args.seed,
            deadline=args.deadline,
        )
        print("soak:", report.figures())
        for problem in report.problems[:50]:
            print("PROBLEM:", problem)
        if args.json:
            figures = asdict(report)
            figures["self_kills"] = dict(report.self_kills)
            args.json.write_text(json.dumps(figures, indent=2) + "\n")
        ok = not report.problems and report.lost == 0 and report.succeeded == args.jobs
        return 0 if ok else 1

    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        return asyncio.run(soak(args.keep))
    with tempfile.TemporaryDirectory(prefix="stepstone-soak-") as base:
        return asyncio.run(soak(Path(base)))


if __name__ == "__main__":
    sys.exit(main())
