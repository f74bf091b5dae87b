"""A worker's identity: a name that outlives the process, so a worker that
restarts can take back at once the runs its previous life held.

A killed worker's runs would otherwise wait out their leases. A worker
started again under the same id, on the same host, knows its previous life
is dead: the id is held by an exclusive ``flock`` on a file in the host's
temporary directory, which the kernel lets go the moment the process dies,
by SIGKILL too. So a start takes the lock first:

- the lock is free: no live worker on this host has the id, and the queue
  may hand this worker the runs claimed under it (``Reclaiming``);
- the lock is held: another live worker here has the id. An id given
  explicitly is refused (:class:`~stepstone.runtime.errors.WorkerIdInUse`),
  since two workers taking each other's runs would run them twice; the
  default id moves on to the next free one (``host``, ``host-2``, ...), so
  several workers per host each get back their own after a restart.

Claims are marked with the id *and the place* it was taken in (the host
name and the kernel's boot id), never the id alone: a worker elsewhere given
the same id by mistake cannot see this host's lock, and must not take runs
from a worker that may well be alive, so it never finds them as its own.
Its runs, and a rebooted host's, come back when their leases lapse, as any
dead worker's do.

Only a life that was killed can have left runs behind: a worker that stops
lets its id go and removes the lock file, so a start that finds the file
already there (:attr:`WorkerIdentity.after_a_kill`) follows one that died
holding the id, and a start that creates it follows none. Only the first
looks for runs to take back: that look reads every record changed within a
couple of leases, which a fleet starting over a fresh backlog would
otherwise each pay in full (100 workers over 2,000 records submitted just
before: 200,000 GETs at their start).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import secrets
import socket
import tempfile

from ..errors import WorkerIdInUse

MAX_SLOTS = 64
"""Default ids tried on one host (``host``, ``host-2``, ...) before a random one."""

LOCK_DIR = "stepstone-workers"
"""Where, under the temporary directory, the locks on worker ids live."""

_HELD: set[int] = set()
"""The lock files this process holds open. A child forked without an exec
(multiprocessing's fork) closes its copies, or a child outliving its parent
would keep the id held, and the restarted worker refused."""


def _close_held_in_child() -> None:
    for fd in _HELD:
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_close_held_in_child)


def default_worker_id() -> str:
    """The id a worker takes when it is given none: the host's name, which
    is also a container's (so one worker per host or per container keeps its
    id across restarts)."""
    return socket.gethostname() or "worker"


@functools.cache
def place() -> str:
    """This host as a claim's mark names it: its name and its kernel's boot
    id (Linux), so a machine that happens to share a host name, or this one
    after a reboot, is another place."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as boot:
            boot_id = boot.read().strip()
    except OSError:
        boot_id = ""
    return f"{socket.gethostname()}/{boot_id}"


class WorkerIdentity:
    """The id of one worker: ``wanted`` if given (else the host's, or the
    next free one on this host), held by a lock while the worker runs."""

    def __init__(self, wanted: str | None = None) -> None:
        self._fd: int | None = None
        self._path: str | None = None
        self.after_a_kill = False
        """Whether the id's lock file was there when this life took it: the
        last life under the id ended without letting it go (module docstring)."""
        self.explicit = False
        self.id = default_worker_id()
        """The id; the default may move on to a free one when the worker starts."""
        if wanted is not None:
            self.want(wanted)

    def want(self, wanted: str) -> None:
        """Take ``wanted`` as the id, before the worker starts (the CLI's ``--worker-id``)."""
        if self._fd is not None:
            raise RuntimeError("a worker's id cannot change while it runs")
        if not wanted.strip() or not wanted.isprintable():
            raise ValueError(f"a worker id must be printable and not empty, got {wanted!r}")
        self.explicit = True
        self.id = wanted

    @property
    def holder(self) -> str:
        """What this worker's claims are marked with: its id in its place."""
        return f"{self.id}@{place()}"

    @property
    def held(self) -> bool:
        return self._fd is not None

    def take(self, scope: str) -> None:
        """Hold the id on ``scope`` (the queue it claims from) for this
        process. Raises WorkerIdInUse if an explicit id is held by another
        live worker on this host."""
        if self._fd is not None:
            return
        base = self.id
        tries = [base] if self.explicit else [base, *(f"{base}-{n}" for n in range(2, MAX_SLOTS))]
        for candidate in tries:
            locked = _lock(scope, candidate)
            if isinstance(locked, tuple):
                self._fd, self._path, self.after_a_kill = locked
                _HELD.add(self._fd)
                self.id = candidate
                return
            if self.explicit:
                raise WorkerIdInUse(
                    f"worker id {candidate!r} is in use by a live worker on this host "
                    f"({locked or 'pid unknown'}); give each worker its own id, or leave "
                    "it to the default, which takes a free one"
                )
        self.id = f"{base}-{secrets.token_hex(3)}"  # no restart will find this one's runs

    def release(self) -> None:
        """Let the id go (the worker stopped). The file goes first, under the
        lock, so a worker that opened it meanwhile sees it is stale."""
        fd, path = self._fd, self._path
        self._fd = self._path = None
        if fd is None:
            return
        _HELD.discard(fd)
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)
        os.close(fd)


def _lock(scope: str, worker_id: str) -> tuple[int, str, bool] | str:
    """Lock the file of ``worker_id`` on ``scope``: (fd, path, whether the file
    was there already), or who holds it."""
    name = hashlib.sha256(f"{scope}\0{worker_id}".encode()).hexdigest()[:32]
    folder = os.path.join(tempfile.gettempdir(), LOCK_DIR)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, f"{name}.lock")
    for _ in range(10):
        try:
            fd, existed = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600), False
        except FileExistsError:
            try:
                fd, existed = os.open(path, os.O_RDWR), True
            except FileNotFoundError:
                continue  # unlinked by its releaser meanwhile
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
            os.close(fd)
            return holder
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # released (and unlinked) between our open and our lock
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
        return fd, path, existed
    return "a lock that keeps changing hands"
