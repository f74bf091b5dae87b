"""Jobs for the debounce tests: each run notes its run id, input and start."""

from __future__ import annotations

import os
import signal
import time

from stepstone import Job, JobContext

LOG_SETTING = "STEPSTONE_DEBOUNCE_LOG"
"""Where a run in another process appends its note (one line each)."""


class Noted:
    """The runs of this process: (run id, input, start)."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, int, float]] = []


class Reindex(Job[str]):
    """A debounced job: its input is a number; it answers which ran."""

    NAME = "debounce-reindex"
    doc: str = "doc-1"
    n: int
    die: bool = False
    """In a worker process: SIGKILL it on the run's first start, once noted."""

    async def run(self, ctx: JobContext) -> str:
        started = time.time()
        log = os.environ.get(LOG_SETTING)
        if log is not None:
            line = f"{ctx.run_id} {self.n} {started!r}\n"
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # (one write: whole lines)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
            if self.die:
                try:
                    os.close(os.open(f"{log}.died", os.O_CREAT | os.O_EXCL))
                except FileExistsError:
                    pass  # (the one kill was made)
                else:
                    os.kill(os.getpid(), signal.SIGKILL)
        else:
            ctx.state(Noted).ran.append((ctx.run_id, self.n, started))
        return f"ran {self.n}"


class Failing(Job[str]):
    """Fails once per run, then succeeds: a retry runs the same input."""

    NAME = "debounce-failing"
    n: int

    async def run(self, ctx: JobContext) -> str:
        ctx.state(Noted).ran.append((ctx.run_id, self.n, time.time()))
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")
        return f"ran {self.n}"
