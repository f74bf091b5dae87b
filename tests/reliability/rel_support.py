"""Worker processes and waiting, for the reliability tests and the soak."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from rel_jobs import ALL_JOBS, emit, open_rel_store, read_events
from rel_wait_jobs import WAIT_JOBS

from stepstone import JobRunner
from stepstone.runtime.clock import Clock
from stepstone.runtime.store_queue import StoreQueue
from stepstone.testing import wait_until

HERE = Path(__file__).resolve().parent
WORKER_SCRIPT = HERE / "rel_worker.py"
SRC = HERE.parents[1] / "src"


async def wait_for(
    cond: Callable[[], bool | Awaitable[bool]],
    timeout: float,  # noqa: ASYNC109 - a deadline that fails the test
    what: str,
    interval: float = 0.02,
) -> None:
    """Poll ``cond`` until it holds; raise AssertionError naming ``what`` at the deadline."""
    await wait_until(cond, timeout=timeout, interval=interval, message=what)


class Workers:
    """Worker processes (``rel_worker.py``, or ``script``) on one store (a
    directory or a URL).

    Each is started with the shared environment plus its own overrides;
    its stderr goes to ``<logs>/worker-<n>.log``.
    """

    def __init__(
        self, root: Path | str, events: Path, logs: Path, script: Path = WORKER_SCRIPT, **env: str
    ) -> None:
        self.root = root
        self.script = script
        self.events = events
        self.logs = logs
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), str(SRC)]),
            "REL_ROOT": str(root),
            "REL_EVENTS": str(events),
            **env,
        }
        self.procs: list[subprocess.Popen[bytes]] = []
        self.started = 0
        self._overrides: dict[int, dict[str, str]] = {}
        logs.mkdir(parents=True, exist_ok=True)

    def start(self, **env: str) -> subprocess.Popen[bytes]:
        self.started += 1
        with open(self.logs / f"worker-{self.started}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, str(self.script)],
                env={**self.env, **env},
                stdout=subprocess.DEVNULL,
                stderr=log,
                cwd=str(HERE),
            )
        self.procs.append(proc)
        self._overrides[proc.pid] = dict(env)
        return proc

    def restart(self, proc: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
        """Start a replacement for a dead worker, with the same overrides."""
        self.procs.remove(proc)
        return self.start(**self._overrides.get(proc.pid, {}))

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def dead(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is not None]

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL a worker and record it in the event log."""
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            emit_to(self.events, "PKILL", proc.pid)

    async def ready(self, proc: subprocess.Popen[bytes], within: float = 30.0) -> None:
        """Wait until the worker has started its loop (its READY line)."""

        def is_ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"worker {proc.pid} exited with {proc.returncode}")
            return any(e[:2] == ["READY", str(proc.pid)] for e in read_events(str(self.events)))

        await wait_for(is_ready, within, f"worker {proc.pid} to start")

    async def stop(self, proc: subprocess.Popen[bytes], within: float = 20.0) -> int:
        """SIGTERM (graceful drain) and wait for the exit code."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        await wait_for(lambda: proc.poll() is not None, within, f"worker {proc.pid} to exit")
        return int(proc.returncode)

    async def stop_all(self, within: float = 20.0) -> list[int]:
        for proc in self.alive():
            proc.send_signal(signal.SIGTERM)
        codes = []
        for proc in list(self.procs):
            codes.append(await self.stop(proc, within))
        return codes

    def kill_all(self) -> None:
        """Teardown: no worker outlives its test, whatever happened."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def log_tail(self, lines: int = 30) -> str:
        out = []
        for path in sorted(self.logs.glob("worker-*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            if text:
                out.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(out)


def emit_to(path: Path, *words: object) -> None:
    """Append an event line from the parent (which has no REL_EVENTS set)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (" ".join(str(w) for w in words) + "\n").encode())
    finally:
        os.close(fd)


def submitter(root: Path | str, clock: Clock | None = None, **kwargs: Any) -> JobRunner:
    """A runner that only submits and reads answers (no worker loop), on the
    same store (a directory or a URL) and layout as the workers."""
    store = open_rel_store(str(root))
    queue = StoreQueue(store, prefix="queue", clock=clock)
    return JobRunner(store, queue=queue, jobs=(*ALL_JOBS, *WAIT_JOBS), clock=clock, **kwargs)


def stats_of(events: list[list[str]], pid: int) -> Mapping[str, int] | None:
    import json

    for e in events:
        if e[:2] == ["STATS", str(pid)]:
            return dict(json.loads(e[2]))
    return None


__all__ = ["Workers", "emit", "emit_to", "stats_of", "submitter", "wait_for"]
