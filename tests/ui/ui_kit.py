"""What the web view's tests share (imported as ``ui_kit``; the fixtures are
conftest.py's): the store's runs, ``stepstone ui`` served from a process of
its own, and a wait on what a browser (another process) shows.

A module of its own, not conftest.py: ``from conftest import`` finds
whichever conftest another directory's tests put first on ``sys.path``.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ui_jobs import Explode, Nap, Ship

from stepstone import JobRunner
from stepstone.ops import reads
from stepstone.testing import wait_until_sync

HERE = Path(__file__).parent
DEADLINE = 30.0


@dataclass
class Runs:
    """The store (its URL) and the ids of its runs, one per state."""

    store: str
    succeeded: str
    dead: str
    scheduled: str
    sleeping: str

    def runner(self) -> JobRunner:
        return JobRunner(self.store, jobs=[Ship, Explode, Nap], retry_backoff=0.0)


SHOWN_BUCKET = "acme-jobs"
"""The bucket a test parametrized with ``store_url="s3"`` uses: the page
heads itself with the store's name, and a screenshot for the docs should show
this one, not a temporary directory of the machine that took it."""


async def status_of(store: str, run_id: str) -> str:
    """Where the run is, as the view and ``stepstone show`` say (dead, not failed)."""
    runner = JobRunner(store)  # not started: no worker takes up what it reads
    try:
        found = await reads.detail(runner, run_id)
    finally:
        await runner.close()
    assert found.status is not None
    return found.status.value


@contextlib.contextmanager
def serve(store: str, tmp_path: Path, *options: str) -> Iterator[str]:
    """``stepstone ui STORE --port 0 --refresh 0.5 OPTIONS`` until the block
    ends, stopped as Ctrl-C would; yields the URL its first line printed (the
    line itself is left in ``tmp_path/first-line``)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    err_path = tmp_path / "ui.err"
    err = err_path.open("w")
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "stepstone", "ui", store),
            *("--port", "0", "--refresh", "0.5", *options),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        (tmp_path / "first-line").write_text(line)
        found = re.search(r"(http://\S+/)", line)
        assert found, f"stepstone ui said {line!r}; stderr: {err_path.read_text()}"
        yield found.group(1)
        proc.terminate()
        assert proc.wait(timeout=DEADLINE) == 0, err_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        err.close()


def wait_for(condition: Any, what: str, timeout: float = DEADLINE) -> None:
    """Poll ``condition()`` (a browser is another process) until true or fail."""
    wait_until_sync(condition, timeout=timeout, interval=0.05, message=what)
