"""The application the pickup and failover benchmarks (benchmarks/pickup.py)
run in a separate ``stepstone worker`` process: its store comes from the
environment (``PICKUP_STORE``, and ``AWS_ENDPOINT_URL_S3`` for moto).

``Started`` answers the wall-clock time its attempt began, so the submitter
can tell submit -> start from submit -> result. ``Held`` appends each
attempt's start time to a file and then runs for ``seconds``, so a failover
run can tell when a killed worker's run started again.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, ClassVar

from stepstone import Job, JobContext, JobRunner


class Started(Job[float]):
    NAME: ClassVar[str] = "bench.started"
    n: int

    async def run(self, ctx: JobContext) -> float:
        return time.time()


class Held(Job[float]):
    NAME: ClassVar[str] = "bench.held"
    path: str
    seconds: float

    async def run(self, ctx: JobContext) -> float:
        began = time.time()
        _append(self.path, f"{began!r} {os.getpid()}\n")
        await asyncio.sleep(self.seconds)
        return began


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(line)


JOBS: list[type[Job[Any]]] = [Started, Held]


def runner() -> JobRunner:
    """The worker's runner (``stepstone worker benchmarks.pickup_app:runner``)."""
    return JobRunner(os.environ["PICKUP_STORE"], jobs=JOBS)
