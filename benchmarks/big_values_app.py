"""One phase of a large-value run for benchmarks.big_values, in a process of its own.

``python -m benchmarks.big_values_app PHASE STORE VALUE MIB``: PHASE is
``write``, ``replay``, ``result`` or ``build`` (see benchmarks.big_values);
it prints one JSON line: the phase's own seconds (from after the imports),
the payload (the outcome record's size, in the result phase) and the
process's own peak RSS (the write phase, which kills itself, writes its
peak to the file ``BIG_VALUES_PEAK`` names first).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import sys
import time
from typing import Any, ClassVar

from pydantic import BaseModel

from stepstone import Job, JobContext, JobRunner
from stepstone.runner import run_id_of
from stepstone.store import NotFound

ROW = 100
"""The length of each string of a ``rows`` value."""


class Text(BaseModel):
    text: str


class Rows(BaseModel):
    rows: list[str]


def make_bytes(size: int) -> bytes:
    return b"z" * size


def make_text(size: int) -> Text:
    return Text(text="0123456789abcdef" * (size // 16) + "x" * (size % 16))


def make_rows(size: int) -> Rows:
    return Rows(rows=[f"{i:0{ROW}d}" for i in range(size // (ROW + 2))])


MAKERS: dict[str, Any] = {"bytes": make_bytes, "text": make_text, "rows": make_rows}


class BigBytes(Job[bytes]):
    NAME: ClassVar[str] = "bench.big.bytes"
    size: int

    def idempotency_key(self) -> str:
        return f"big-{self.size}"

    async def run(self, ctx: JobContext) -> bytes:
        value = await ctx.step("make", make_bytes, self.size)
        _crash_if_asked()
        return value


class BigText(Job[Text]):
    NAME: ClassVar[str] = "bench.big.text"
    size: int

    def idempotency_key(self) -> str:
        return f"big-{self.size}"

    async def run(self, ctx: JobContext) -> Text:
        value = await ctx.step("make", make_text, self.size)
        _crash_if_asked()
        return value


class BigRows(Job[Rows]):
    NAME: ClassVar[str] = "bench.big.rows"
    size: int

    def idempotency_key(self) -> str:
        return f"big-{self.size}"

    async def run(self, ctx: JobContext) -> Rows:
        value = await ctx.step("make", make_rows, self.size)
        _crash_if_asked()
        return value


JOBS: dict[str, type[Job[Any]]] = {"bytes": BigBytes, "text": BigText, "rows": BigRows}


def own_peak_mib() -> float:
    """This process's peak resident set, its children's apart."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _crash_if_asked() -> None:
    """The write phase ends as a crash does, once the step's memo is written
    (its peak written down first, to ``BIG_VALUES_PEAK``)."""
    if os.environ.get("BIG_VALUES_CRASH") == "1":
        with open(os.environ["BIG_VALUES_PEAK"], "w", encoding="utf-8") as f:
            f.write(repr(own_peak_mib()))
        os.kill(os.getpid(), signal.SIGKILL)


async def _phase(phase: str, store: str, value: str, size: int) -> dict[str, Any]:
    job_type = JOBS[value]
    job = job_type(size=size)
    started = time.monotonic()
    if phase == "build":
        built = MAKERS[value](size)
        return {"seconds": time.monotonic() - started, "built": type(built).__name__}
    if phase == "result":
        async with JobRunner(store, jobs=[job_type]) as api:  # (no worker runs: not started)
            result = await api.handle(job).result(timeout=CHILD_WAIT)
            info = await api.store.head(api.layout.outcome(run_id_of(job)))
            del result
            return {"seconds": time.monotonic() - started, "payload": info.size}
    runner = JobRunner(store, jobs=[job_type], worker_id="big-values", lease=60.0)
    async with runner:
        if phase == "write":
            os.environ["BIG_VALUES_CRASH"] = "1"
            await runner.submit(job)
            await asyncio.sleep(CHILD_WAIT)  # the job kills this process
            raise SystemExit("the write phase's job did not end its process")
        key = runner.layout.outcome(run_id_of(job))
        deadline = time.monotonic() + CHILD_WAIT
        while time.monotonic() < deadline:
            try:
                await runner.store.head(key)
                return {"seconds": time.monotonic() - started}
            except NotFound:  # until the outcome stands
                await asyncio.sleep(0.02)
    raise SystemExit("the replay phase's run recorded no outcome in time")


CHILD_WAIT = 300.0


def main() -> None:
    phase, store, value, mib = sys.argv[1:5]
    size = int(float(mib) * 2**20) or 8
    if phase == "write":
        os.environ["BIG_VALUES_CRASH"] = "1"
    report = asyncio.run(_phase(phase, store, value, size))
    print(json.dumps(report | {"peak_mib": own_peak_mib()}), flush=True)


if __name__ == "__main__":
    main()
