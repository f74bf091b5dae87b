"""Profile one case in-process: ``python -m benchmarks.profile w3-memory [--quick]``.

cProfile's figures are inflated (it costs per call), so read them for where
time goes, not for throughput; the numbers come from ``benchmarks.run``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats

from .cases import run_one
from .run import plan


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile")
    parser.add_argument("case")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--n", type=int, default=0, help="override N")
    parser.add_argument("--sort", default="tottime")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--out", default="", help="also dump the raw stats here")
    args = parser.parse_args()
    spec = plan(args.quick)[args.case]
    if args.n:
        spec.n = args.n
    profiler = cProfile.Profile()
    profiler.enable()
    result = run_one(spec)
    profiler.disable()
    print({k: result.get(k) for k in ("name", "jobs_per_s", "p50_ms", "p99_ms")})
    stats = pstats.Stats(profiler).strip_dirs().sort_stats(args.sort)
    stats.print_stats(args.top)
    if args.out:
        stats.dump_stats(args.out)


if __name__ == "__main__":
    main()
