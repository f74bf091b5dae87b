"""The commit process: a busy store's write batches committed beside the event loop.

Why a process: the thread that commits a batch (``commit``) makes about
fifteen system calls a write, and each one gives up the interpreter lock and
takes it back. Under load the event loop and that thread then alternate on
the one lock instead of running side by side, and the loop sits idle while
jobs wait for their writes. In a process of its own the same work runs on
another core with a lock of its own, so a busy store gets through more jobs
a second (docs/performance.md, "Committing in a helper process").

The helper runs this module's ``main``, started by the store that needs
it, talking over its stdin and stdout: the store sends a batch of
writes (key, bytes, condition, etag) and waits; the helper commits them with
the same ``Committer`` a thread would use, on the same root, under the same
key locks, and answers with each write's etag or error, and how often it
flushed the whole filesystem (a flush retires the store's journaled
creates). A batch is as durable, and as atomic per write, as one committed
in a thread.

Its life: it says it is ready once its imports are done (the store commits
in its own thread until then), and it exits when its stdin closes, that is
when the store closes or the process that started it exits or is killed.
It ignores SIGINT and SIGTERM, so a Ctrl-C or a service stop reaches the
parent, which drains through it. If it dies, the batch it held fails with
StoreUnavailable (its writes may or may not have been made, like a request
to S3 that timed out), a batch it never got is committed in the thread, and
the store commits in its own thread from then on.

Frames on the pipes: a 4-byte little-endian length, then msgpack.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import msgpack

from .. import errors
from ..errors import StoreError, StoreUnavailable
from ..keys import RESERVED_SEGMENT
from .batches import Write
from .commit import Committer
from .flush import HAVE_SYNCFS
from .locks import KeyLocks
from .paths import KeyPaths
from .temp_files import TempFiles

READY = b"stepstone commit process 1"
"""The helper's first frame: it is up, and speaks this protocol."""

PACKAGES = ("stepstone", "stepstone.store", "stepstone.store.file")

BOOTSTRAP = f"""
import os, sys, types
for name, path in zip({PACKAGES!r}, sys.argv[3:]):
    package = types.ModuleType(name)
    package.__path__ = path.split(os.pathsep)
    sys.modules[name] = package
from stepstone.store.file.commit_process import main
main(sys.argv[1:3])
"""
"""How the helper starts (``python -c BOOTSTRAP root sync paths...``): the
packages above it are made empty, found where this process found them, so
that it imports the file store's own modules and not the whole engine that
``import stepstone`` brings, and starts in a fraction of the time and
memory (benchmarks/NOTES.md)."""

_LENGTH = struct.Struct("<I")


def _error_class(name: str) -> type[StoreError]:
    """The store error an answer names (StoreError for a name it does not know)."""
    cls = getattr(errors, name, None)
    return cls if isinstance(cls, type) and issubclass(cls, StoreError) else StoreError


class ProcessGone(Exception):
    """The helper exited, or said something that is not the protocol."""


class Unsent(ProcessGone):
    """The batch was not handed to the helper (the store closed it, or it was
    gone already): nothing of it was done, it can be committed elsewhere."""


def can_start() -> bool:
    """Whether this interpreter can start a helper (not a frozen application)."""
    return bool(sys.executable) and not getattr(sys, "frozen", False)


IDLE_CPU_NEEDED = 0.5
"""CPUs that must have sat idle, on average, while a store committed its
last writes in a thread, for a helper to start: it needs a CPU to run on.
(One worker process on two CPUs leaves about one idle; four leave none,
and there helpers only add switching, which costs jobs a second:
docs/performance.md, "Committing in a helper process".)"""


class CpuWatch:
    """How many of the machine's CPUs sat idle between two looks (Linux's
    ``/proc/stat``; unknown elsewhere)."""

    def __init__(self) -> None:
        self._last = _cpu_times()

    def idle_since_last_look(self) -> float | None:
        """Idle CPUs on average since the last look (None: unknown here)."""
        now, last = _cpu_times(), self._last
        self._last = now
        if now is None or last is None or now[1] <= last[1]:
            return None
        idle, total = now[0] - last[0], now[1] - last[1]
        return idle / total * (os.cpu_count() or 1)


def _cpu_times() -> tuple[int, int] | None:
    """The machine's idle and total CPU time so far, in ticks (None: no ``/proc/stat``)."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = [int(n) for n in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 5:
        return None
    # idle and iowait, of user .. steal (guest time is counted in user already)
    return fields[3] + fields[4], sum(fields[:8])


def worth_starting(idle_cpus: float | None) -> bool:
    """Whether a helper would help: it can start, there are two CPUs or
    more for it and the event loop to run on side by side, and one sat
    idle lately (``idle_cpus``, when known)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # (not Linux)
        cpus = os.cpu_count() or 1
    enough_idle = idle_cpus is None or idle_cpus >= IDLE_CPU_NEEDED
    return cpus >= 2 and enough_idle and can_start()


class CommitProcess:
    """The parent's end of one helper: started, asked, closed by one store.

    ``commit`` is called by one thread at a time (the store's write queue
    serves one batch at a time); ``close`` waits for a batch under way, and
    a batch after it is refused, ``Unsent``.
    """

    def __init__(self, root: str, sync: str, location: str) -> None:
        self._location = location
        env = dict(os.environ)
        # The helper imports what it needs from wherever this process did.
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        paths = [os.pathsep.join(sys.modules[name].__path__) for name in PACKAGES]
        self._proc = subprocess.Popen(
            [sys.executable, "-c", BOOTSTRAP, root, sync, *paths],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._to = self._proc.stdin.fileno()
        self._from = self._proc.stdout.fileno()
        self._ready = False
        self._lock = threading.Lock()  # (held for a batch; close waits for it)
        self._closed = False
        _LIVE.add(self)

    @property
    def up(self) -> bool:
        """Whether it said it is ready and is not closed (without waiting)."""
        return self._ready and not self._closed

    def ready(self, wait: float = 0.0) -> bool:
        """Whether the helper is up, waiting ``wait`` seconds at most for it
        (False once closed). Raises ProcessGone if it exited first."""
        with self._lock:
            if self._closed:
                return False
            if not self._ready and _readable(self._from, wait):
                try:
                    said = _read_frame(self._from)
                except (OSError, ProcessGone) as exc:
                    raise ProcessGone(self._exit_status()) from exc
                if said != READY:
                    raise ProcessGone(f"it said {said[:40]!r}, not that it is ready")
                self._ready = True
            return self._ready

    def commit(self, writes: Sequence[Write]) -> int:
        """Commit ``writes`` in the helper: each gets its etag or its error.
        Returns how many times the batch flushed the whole filesystem
        (``syncfs``; not 0: all it held before the call is durable). Raises
        Unsent if the batch never reached the helper, and ProcessGone if no
        answer came back (the writes' fate unknown)."""
        request = msgpack.packb([(w.key, w.data, w.condition, w.etag) for w in writes])
        with self._lock:
            if self._closed:
                raise Unsent("the store closed it")
            try:
                _write_frame(self._to, request)
            except OSError as exc:  # (a pipe with nobody reading: EPIPE)
                raise Unsent(self._exit_status()) from exc
            try:
                syncs, answers = msgpack.unpackb(_read_frame(self._from))
            except (OSError, ValueError, TypeError, ProcessGone) as exc:
                raise ProcessGone(self._exit_status()) from exc
        if len(answers) != len(writes):
            raise ProcessGone("it answered a batch with the wrong number of writes")
        for write, (etag, error, message) in zip(writes, answers, strict=True):
            if error is None:
                write.result = etag
            else:
                write.error = _error_class(error)(message, location=self._location, key=write.key)
        return int(syncs)

    def close(self, timeout: float = 10.0) -> int:
        """Close the helper's stdin and wait for it to exit (killed after
        ``timeout``); returns its exit status (0: it ended at the end of its
        stdin; negative: killed by that signal)."""
        with self._lock:
            self._closed = True
        _LIVE.discard(self)
        for stream in (self._proc.stdin, self._proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            return self._proc.wait()

    def _exit_status(self) -> str:
        try:
            code = self._proc.wait(1.0)
        except subprocess.TimeoutExpired:
            return "it stopped answering"
        return f"it exited with status {code}"

    def _forget_in_child(self) -> None:
        """(In a forked child.) Close this process's copies of the pipes: the
        helper is the parent's, and must see its stdin close when the parent's
        copy does, whoever else was forked meanwhile."""
        self._closed = True
        for stream in (self._proc.stdin, self._proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()


_LIVE: weakref.WeakSet[CommitProcess] = weakref.WeakSet()


def _forget_all_in_child() -> None:
    for helper in list(_LIVE):
        helper._forget_in_child()
    _LIVE.clear()


os.register_at_fork(after_in_child=_forget_all_in_child)


def _readable(fd: int, wait: float) -> bool:
    """Whether ``fd`` has something to read, or its end (``poll``: unlike
    ``select``, it takes descriptors past 1,024, as a busy server has)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(wait * 1000))


def _write_frame(fd: int, body: bytes) -> None:
    data = memoryview(_LENGTH.pack(len(body)) + body)
    while data:
        data = data[os.write(fd, data) :]


def _read_frame(fd: int) -> bytes:
    (length,) = _LENGTH.unpack(_read_exactly(fd, _LENGTH.size))
    return _read_exactly(fd, length)


def _read_exactly(fd: int, n: int) -> bytes:
    chunks: list[bytes] = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            raise ProcessGone("end of file")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


# -- the helper's side -----------------------------------------------------------


class _Syncs:
    """Stands in for the journal in the helper: counts the batch's flushes of
    the whole filesystem, for the store to retire its journal by."""

    def __init__(self) -> None:
        self.count = 0

    def mark(self) -> int:
        return 0

    def retire(self, mark: int) -> None:
        self.count += 1


def serve(root: str, sync: str, requests: int, answers: int) -> None:
    """Commit each batch read from ``requests`` and answer on ``answers``,
    until ``requests`` ends."""
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY) if sync == "syncfs" else None
    tmp = os.path.join(root, RESERVED_SEGMENT)
    location = f"file://{root}"
    temp = TempFiles(tmp, fsync=sync == "fsync")
    syncs = _Syncs()
    committer = Committer(
        KeyPaths(root, location, fsync_new_directories=sync == "fsync"),
        temp,
        KeyLocks(os.path.join(tmp, "locks"), location),
        syncfs_fd=root_fd,
        journal=syncs,
    )
    _write_frame(answers, READY)
    try:
        while True:
            try:
                request = _read_frame(requests)
            except ProcessGone:
                return
            writes = [
                Write(key, data, condition, etag) for key, data, condition, etag in _batch(request)
            ]
            syncs.count = 0
            try:
                committer.commit(writes)
            except Exception as exc:  # a bug: fail the batch, keep serving
                for write in writes:
                    if write.error is None:
                        write.error = StoreUnavailable(f"the commit process failed: {exc!r}")
            _write_frame(answers, msgpack.packb([syncs.count, [_answer(w) for w in writes]]))
    finally:
        temp.clear_spares()


def _batch(frame: bytes) -> list[Any]:
    batch = msgpack.unpackb(frame)
    if not isinstance(batch, list):
        raise ProcessGone("a request that is not a batch")
    return batch


def _answer(write: Write) -> tuple[str | None, str | None, str | None]:
    if write.error is None:
        return write.result, None, None
    error = write.error
    message = error.message if isinstance(error, StoreError) else repr(error)
    return None, type(error).__name__, message


def main(argv: list[str]) -> None:
    """The helper: ``argv`` is the store's root and its sync mode."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    root, sync = argv
    if sync == "syncfs" and not HAVE_SYNCFS:
        raise SystemExit(2)
    serve(root, sync, sys.stdin.fileno(), sys.stdout.fileno())
