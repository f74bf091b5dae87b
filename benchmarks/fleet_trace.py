"""Where a simulated fleet's run goes, second by second.

``python -m benchmarks.fleet_trace [--case fleet100-limits] [--quick]`` runs
one case of ``benchmarks.run``'s plan (a ``fleet`` case) in this process
with the bucket's trace on, and prints a line per second of the measured
run (from the first answer after the submits to the last): for each
partition and class, the requests served, then those refused with
SlowDown, then those that ended in another error (NotFound mostly: a record
read after it was deleted); then, sampled that second, how many of the
queue's records were free, held under a live lease, or held under one that
had run out (``records free/held/lapsed``, read past the bucket's limits and
counts). The totals per job are the case's own (``benchmarks.run`` prints
the same).

Why: jobs/s and SlowDowns a job say how far a fleet is from its limit, not
where the time goes; a run at the limit shows as the partition that sets it
served near its rate, and the start and the tail as the seconds around it
(benchmarks/NOTES.md, "The fleet's tail and false hot objects"); the
records' states say whether the jobs not done yet wait to be found (free)
or are being worked on (held).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections import Counter
from collections.abc import Sequence

from .fleet import STATES, fleet
from .run import plan

SERVED = "served"
REFUSED = "SlowDown"


def timeline(
    trace: list[tuple[float, str, str]],
    seconds: float,
    states: Sequence[tuple[float, Counter[str]]] = (),
) -> list[str]:
    """The trace's last ``seconds`` (the measured run ends with the last
    job's answers), a line per second: ``part=served/refused/other``, then
    the records' states sampled in that second, if any."""
    if not trace:
        return []
    end = max(t for t, _, _ in trace)
    start = end - seconds
    sampled = {int(at - start): state for at, state in states if start <= at <= end}
    counts: Counter[tuple[int, str, str]] = Counter()
    for at, part, answer in trace:
        if at >= start:
            kind = answer if answer in (SERVED, REFUSED) else "other"
            counts[(int(at - start), part, kind)] += 1
    parts = sorted({part for _, part, _ in counts})
    lines = []
    for second in range(int(seconds) + 1):
        cells = [
            f"{part}={counts[(second, part, SERVED)]}/{counts[(second, part, REFUSED)]}"
            f"/{counts[(second, part, 'other')]}"
            for part in parts
            if any(counts[(second, part, k)] for k in (SERVED, REFUSED, "other"))
        ]
        if (state := sampled.get(second)) is not None:
            cells.append("records free/held/lapsed=" + "/".join(str(state[k]) for k in STATES[:3]))
        lines.append(f"{second:3d}s  " + "  ".join(cells))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", default="fleet100-limits")
    parser.add_argument("--quick", action="store_true", help="the quick plan's size")
    options = parser.parse_args()
    spec = plan(options.quick)[options.case]
    if spec.case != "fleet" or spec.backend != "s3like":
        raise SystemExit(f"{options.case} is not a StoreQueue fleet case")
    logging.basicConfig(level=logging.ERROR)  # (the workers' warnings would bury the table)
    trace: list[tuple[float, str, str]] = []
    states: list[tuple[float, Counter[str]]] = []
    result = asyncio.run(fleet(spec, trace=trace, states=states))
    # The trace also holds the joins after the run: the measured seconds end
    # where the last job's outcome was written.
    written = [t for t, part, answer in trace if part.startswith("write outcomes")]
    run = [entry for entry in trace if not written or entry[0] <= max(written)]
    print(
        f"{options.case}: {result['jobs_per_s']} jobs/s, {result['slowdowns_per_job']} "
        f"SlowDowns a job, {result['seconds']} s; per second, served/SlowDown/other:"
    )
    for line in timeline(run, result["seconds"], states):
        print(line)


if __name__ == "__main__":
    main()
