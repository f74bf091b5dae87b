"""Jobs for the singleton tests: one type per policy, keyed by account.

In the test's process each run waits for its gate (``Gates``) and notes its
start and end there; in a worker process (``STEPSTONE_SINGLETON_LOG`` set)
it notes them in that file and takes ``hold`` seconds."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import ClassVar

from stepstone import Job, JobContext, Singleton

LOG_SETTING = "STEPSTONE_SINGLETON_LOG"


class Gates:
    """The runs of this process: what each did, and the gates they wait at."""

    def __init__(self) -> None:
        self.noted: list[tuple[str, int, str]] = []
        self._gates: dict[int, asyncio.Event] = {}

    def _gate(self, n: int) -> asyncio.Event:
        return self._gates.setdefault(n, asyncio.Event())

    def open(self, *ns: int) -> None:
        for n in ns:
            self._gate(n).set()

    async def wait(self, n: int) -> None:
        await self._gate(n).wait()


def note(ctx: JobContext, n: int, what: str) -> None:
    log = os.environ.get(LOG_SETTING)
    if log is None:
        ctx.state(Gates).noted.append((ctx.run_id, n, what))
        return
    line = f"{what} {ctx.run_id} {n} {os.getpid()} {time.time()!r}\n"
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class Sync(Job[str]):
    """Syncs an account: one run per account at a time (a singleton key)."""

    NAME: ClassVar[str] = "singleton-queue"
    singleton: ClassVar[Singleton | None] = Singleton.QUEUE
    account: str = "acct-1"
    n: int
    hold: float = 0.0
    die: bool = False
    """In a worker process: SIGKILL it on the run's first start."""

    def concurrency_key(self) -> str:
        return self.account

    async def run(self, ctx: JobContext) -> str:
        note(ctx, self.n, "start")
        log = os.environ.get(LOG_SETTING)
        if self.die and log is not None:
            try:
                os.close(os.open(f"{log}.died-{self.n}", os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        try:
            if os.environ.get(LOG_SETTING) is None:
                await ctx.state(Gates).wait(self.n)
            else:
                await asyncio.sleep(self.hold)
        except asyncio.CancelledError:
            note(ctx, self.n, "stopped")
            raise
        note(ctx, self.n, "end")
        return f"ran {self.n}"


class SkipSync(Sync):
    NAME: ClassVar[str] = "singleton-skip"
    singleton: ClassVar[Singleton | None] = Singleton.SKIP


class CancelSync(Sync):
    NAME: ClassVar[str] = "singleton-cancel-running"
    singleton: ClassVar[Singleton | None] = Singleton.CANCEL_RUNNING


class NewestSync(Sync):
    NAME: ClassVar[str] = "singleton-skip-newest"
    singleton: ClassVar[Singleton | None] = Singleton.SKIP_NEWEST


SINGLETON_JOBS = [Sync, SkipSync, CancelSync, NewestSync]
