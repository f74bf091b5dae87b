"""Job types with on_settled hooks, importable by the child processes of test_hooks."""

from __future__ import annotations

import json
import os
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
