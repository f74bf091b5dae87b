"""The application of tests/reliability/test_restart_reclaim.py, run by
``stepstone worker rel_reclaim_app:runner`` on the store named by
``RECLAIM_STORE``, with a lease far longer than any test waits: a run that
starts again after its worker was killed was taken back, not lapsed."""

from __future__ import annotations

import asyncio
import os
from typing import ClassVar

from stepstone import Job, JobContext, JobRunner

LEASE = 600.0


class Held(Job[int]):
    """Writes a line per start to ``path`` (its number, its attempt, the
    pid); its first start never ends. Returns how many starts it took."""

    NAME: ClassVar[str] = "reclaim.held"
    path: str

    async def run(self, ctx: JobContext) -> int:
        start = len(_lines(self.path)) + 1
        _append(self.path, f"{start} {ctx.attempt} {os.getpid()}\n")
        if start == 1:
            await asyncio.sleep(3600)
        return start


def _lines(path: str) -> list[str]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as lines:
        return lines.read().splitlines()


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(line)


class Quick(Job[int]):
    NAME: ClassVar[str] = "reclaim.quick"
    n: int

    async def run(self, ctx: JobContext) -> int:
        return self.n


def runner() -> JobRunner:
    return JobRunner(os.environ["RECLAIM_STORE"], jobs=[Held, Quick], lease=LEASE)
