"""Job types with on_settled hooks, importable by the child processes of test_hooks."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from typing import ClassVar

from stepstone import Job, JobContext, Outcome

HOOK_LOG = "STEPSTONE_TEST_HOOK_LOG"
"""A file each hook call appends a line to: pid, job id, status."""
CRASH_IN_HOOK = "STEPSTONE_TEST_CRASH_IN_HOOK"
"""Set in a process: its hook exits the process at once, as a SIGKILL would,
after the outcome is recorded and before the run is acked."""
RUN_LOG = "STEPSTONE_TEST_RUN_LOG"


def _append(path: str, line: str) -> None:
    with open(path, "a") as log:
        log.write(line + "\n")


class Settles(Job[int]):
    NAME: ClassVar[str] = "test.hooks.settles"
    n: int

    async def run(self, ctx: JobContext) -> int:
        _append(os.environ[RUN_LOG], str(os.getpid()))
        return self.n * 2

    async def on_settled(self, outcome: Outcome[int]) -> None:
        line = {"pid": os.getpid(), "id": outcome.id, "n": self.n, "result": outcome.result}
        _append(os.environ[HOOK_LOG], json.dumps(line))
        if os.environ.get(CRASH_IN_HOOK):
            os._exit(3)


HOOK_RELEASE = threading.Event()
"""Lets the hooks below return (a test sets it at its end)."""
HOOKS_ENTERED: list[int] = []


class HangsInHook(Job[int]):
    """A plain hook that never returns on its own (an HTTP call with no timeout)."""

    NAME: ClassVar[str] = "test.hooks.hangs"
    n: int

    async def run(self, ctx: JobContext) -> int:
        return self.n

    def on_settled(self, outcome: Outcome[int]) -> None:
        HOOKS_ENTERED.append(self.n)
        HOOK_RELEASE.wait()


class IgnoresCancel(Job[int]):
    """An async hook that catches its cancellation and goes on waiting."""

    NAME: ClassVar[str] = "test.hooks.ignores_cancel"

    async def run(self, ctx: JobContext) -> int:
        return 1

    async def on_settled(self, outcome: Outcome[int]) -> None:
        HOOKS_ENTERED.append(1)
        while not HOOK_RELEASE.is_set():
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                continue
