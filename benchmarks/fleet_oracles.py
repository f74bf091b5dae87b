"""What a fleet at a tenth of S3's limits gets when its processes know more than their own answers.

Issue 32 asks of 100 simulated workers draining a backlog at a tenth of S3's
per-prefix limits (``fleet100-limits``): at least 80% of the jobs a second
the limits allow, under 0.1 SlowDown answers a job, and no less than 10
workers get, from a process-wide slow-down each process learns from its own
answers. This runs the same case with each process told more than a process
can know, to see which of the targets information would meet:

- ``own``: the engine as it is, each process learning from its own answers;
- ``shared``: one set of send rates for the whole fleet, as if the hundred
  processes were one (every answer any of them gets moves every one's rate);
- ``fixed``: every process's rate for each partition and class set from
  its first request to its share of the limit (the limit over the
  workers), as if each knew the bucket's limits and the fleet's size, and
  never moved by an answer.

The submitter keeps rates of its own in every mode (it submits the backlog
before the workers start). ``python -m benchmarks.fleet_oracles [--runs N]
[--case C]``; figures and what they say: benchmarks/NOTES.md, "What more
knowledge would buy".
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from typing import Any

from stepstone.store.s3.send_rate import AdaptiveRate
from stepstone.store.s3.throttle import AdaptiveRates

from .cases import Spec
from .fleet import fleet
from .run import plan
from .s3_like import S3_RATES

MODES = ("own", "shared", "fixed")


class _Fixed(AdaptiveRate):
    """A rate no answer moves."""

    def record(self, *, sent: float, refused: bool) -> None:
        return None


class _Shares(AdaptiveRates):
    """Rates fixed, from each partition's first request, at ``share`` of its limit."""

    def __init__(self, share: float) -> None:
        super().__init__()
        self._share = share

    def _named(self, partition: str) -> AdaptiveRate:
        rate = self.by_partition.get(partition)
        if rate is None:
            limit = S3_RATES["read" if partition.endswith(" reads") else "write"]
            rate = _Fixed(rate=limit * self._share)
            self.by_partition[partition] = rate
        return rate


def rates_for(mode: str, spec: Spec) -> Callable[[int], AdaptiveRates]:
    """Each client's send rates in ``mode``, by its number (0: the submitter's)."""
    if mode == "own":
        return lambda n: AdaptiveRates()
    if mode == "shared":
        one = AdaptiveRates()
        return lambda n: one if n else AdaptiveRates()
    share = spec.limit_scale / spec.workers
    return lambda n: _Shares(share) if n else AdaptiveRates()


async def measure(spec: Spec, mode: str) -> dict[str, Any]:
    result = await fleet(spec, rates=rates_for(mode, spec))
    keys = ("jobs_per_s", "seconds", "slowdowns_per_job", "slowdowns_by_partition", "worker")
    return {"mode": mode, **{k: result[k] for k in keys}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--case", default="fleet100-limits")
    parser.add_argument("--runs", type=int, default=1, help="rounds, the modes interleaved")
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()
    spec = plan(quick=False)[args.case]
    for _ in range(args.runs):
        for mode in args.modes.split(","):
            print(json.dumps(asyncio.run(measure(spec, mode))), flush=True)


if __name__ == "__main__":
    main()
