"""What the CLI tests share besides fixtures."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from cli_app import Boom, Chatty, Gated, Greet, Refuse, Report

from stepstone import JobRunner
from stepstone.testing import wait_until_sync

DEADLINE = 30.0


@dataclass
class Result:
    status: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


Cli = Callable[..., Result]


def file_runner(store_dir: Path) -> JobRunner:
    """A runner on the test's store with cli_app's jobs (the worker's, in the test process)."""
    return JobRunner(
        str(store_dir),
        jobs=[Greet, Boom, Gated, Refuse, Report, Chatty],
        poll_interval=0.05,
        retry_backoff=0.0,
    )


@contextmanager
def worker_process(
    command: Sequence[str], env: dict[str, str], stderr: IO[str] | int = subprocess.DEVNULL
) -> Iterator[subprocess.Popen[bytes]]:
    """A ``stepstone worker`` process for the block (its stderr to ``stderr``);
    SIGTERM at the block's end, which it must answer by draining and exiting
    0 (killed if the block raised)."""
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        yield proc
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def wait_for(cond: Callable[[], object], what: str, timeout: float = DEADLINE) -> None:
    wait_until_sync(cond, timeout=timeout, message=what)


def one_line_error(result: Result, *fragments: str) -> None:
    """A failure is exit 1 or 2 and exactly one line on stderr naming the problem."""
    assert result.status in (1, 2), result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{result.err}"
    assert lines[0].startswith("stepstone: error: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
