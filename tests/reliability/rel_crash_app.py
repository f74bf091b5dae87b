"""The application of tests/reliability/test_worker_crashes.py, run by
``stepstone worker rel_crash_app:runner`` on the store named by
``CRASH_STORE``. Its runs say, in files under ``CRASH_DIR``, each start
(with the attempt it was on) and each step's one execution, and hold after
their first step until the file ``go`` exists there, so a test can kill
their workers under them."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import ClassVar

from stepstone import DEFAULT_MAX_LAPSES, Job, JobContext, JobRunner

LEASE = 2.0


def _dir() -> Path:
    return Path(os.environ["CRASH_DIR"])


def _append(name: str, line: str) -> None:
    with (_dir() / name).open("a", encoding="utf-8") as out:
        out.write(line + "\n")


async def _mark(n: int, step: str) -> str:
    _append(f"ran-{step}", str(n))
    return f"{step}{n}"


class Steady(Job[str]):
    """An innocent run: a step, a hold until ``go``, a step."""

    NAME: ClassVar[str] = "crash.steady"
    n: int

    def idempotency_key(self) -> str:
        return f"steady:{self.n}"

    async def run(self, ctx: JobContext) -> str:
        first = await ctx.step("a", _mark, self.n, "a")
        _append("starts", f"{self.n} {ctx.attempt} {os.getpid()}")
        while not (_dir() / "go").exists():  # noqa: ASYNC110 - the test makes it
            await asyncio.sleep(0.02)
        second = await ctx.step("b", _mark, self.n, "b")
        return f"{first}+{second}"


def runner() -> JobRunner:
    max_lapses = int(os.environ.get("CRASH_MAX_LAPSES", DEFAULT_MAX_LAPSES))
    return JobRunner(os.environ["CRASH_STORE"], jobs=[Steady], lease=LEASE, max_lapses=max_lapses)
