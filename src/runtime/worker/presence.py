"""A worker's record in the store: who it is, where, with what room, holding
which runs, and when it was last seen, so an operator can see the fleet.

Each life of a worker (one start of one process) keeps one small object,
``<prefix>/<holder digest>/<life>`` (the runner puts it under
``workers/``): the digest of what its claims are marked with (its id in its
place, :mod:`stepstone.runtime.worker.identity`), and a random token of this
life. A life of its own, not the id alone, because two processes may carry
one id (on two hosts, or on a queue that holds no lock on ids): each has its
own record, and neither overwrites the other's.

- **It beats.** The record is written at the start and every ``every``
  seconds (real ones: this is about the process's liveness), with what the
  worker holds then; a write that fails is logged and tried at the next beat,
  never stopping the worker. ``BEAT`` weighs a PUT a beat, all month
  (docs/operations.md prices it), against how soon a dead worker shows as
  gone: ``GONE_AFTER`` beats, a default lease, which is when its runs are
  taken over too; and the runs it holds are the list at most a beat old.
- **A clean stop marks it.** After the drain the worker writes it once more,
  stopped, holding nothing.
- **A dead worker's is found out.** A record not stopped whose last beat is
  more than ``GONE_AFTER`` of its own beats old is gone (:meth:`WorkerRecord.state`).
- **The set stays bounded.** A worker sweeps at its start and about every
  ``SWEEP_EVERY`` seconds: it deletes every record not written for ``AGE_OUT``
  (if it is still the version listed), and, when it holds its id's lock
  (so every earlier life under its holder on this host is over), the
  records of those earlier lives at once.
- **A record is checked before it is shown.** :meth:`WorkerRecord.decode`
  checks every value with :mod:`stepstone.runtime.plausible`; a record that
  fails is unreadable, named by its key, and cannot break a page.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import socket
from dataclasses import dataclass
from typing import Literal, Protocol

import msgpack

from stepstone.store.base import DEFAULT_PAGE_SIZE, ObjectStore
from stepstone.store.errors import NotFound, PreconditionFailed

from .. import plausible
from ..clock import Clock
from ..error_text import describe
from ..run_id import is_storable_id

log = logging.getLogger("stepstone.runtime.worker")

BEAT = 5.0
"""Seconds between a worker's writes of its record, by default: half the
default lease (``stepstone.runtime.queue.DEFAULT_LEASE``)."""
GONE_AFTER = 2
"""Beats a live worker's record may miss before it shows as gone: at the
default beat, a default lease, after which its runs are taken over too."""
AGE_OUT = 86_400.0
"""Seconds after its last write a record is deleted by the next sweep."""
SWEEP_EVERY = 3600.0
"""Seconds between a worker's sweeps, about (counted in its beats)."""
SWEEP_PAGES = 10
"""Listing pages one sweep reads at most (the set stays well under this)."""
RUNS_LISTED = 50
"""Run ids a record lists at most (it counts them all)."""
MAX_RECORD_BYTES = 64 * 1024
"""Bytes past which an object under ``workers/`` is no worker's record (one
is a few hundred bytes, a few thousand holding RUNS_LISTED run ids): a
reader names it without reading it."""
STOP_WRITE = 5.0
"""Seconds the write of a stopped record may take before the stop goes on without it."""

State = Literal["live", "gone", "stopped"]

VERSION = 1


class Described(Protocol):
    """What a record says of its worker, read at each beat (the Worker)."""

    @property
    def worker_id(self) -> str: ...
    @property
    def holder(self) -> str: ...
    @property
    def concurrency(self) -> int: ...
    def held_runs(self) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """One worker life as its record says, every value checked."""

    worker_id: str
    host: str
    pid: int
    life: str
    concurrency: int
    held: int
    """Runs in flight in the worker at its last beat."""
    runs: tuple[str, ...]
    """Their ids (at most RUNS_LISTED)."""
    started_at: float
    beat_at: float
    """When the record was last written (the worker's clock)."""
    every: float
    """The worker's beat, so readers judge it by its own pace."""
    stopped_at: float | None = None

    def state(self, now: float) -> State:
        """stopped (it said so), gone (more than GONE_AFTER beats missed) or live."""
        if self.stopped_at is not None:
            return "stopped"
        return "gone" if now - self.beat_at > GONE_AFTER * self.every else "live"

    def encode(self) -> bytes:
        body = {
            "v": VERSION,
            "id": self.worker_id,
            "host": self.host,
            "pid": self.pid,
            "life": self.life,
            "concurrency": self.concurrency,
            "held": self.held,
            "runs": list(self.runs),
            "started": self.started_at,
            "beat": self.beat_at,
            "every": self.every,
            "stopped": self.stopped_at,
        }
        data: bytes = msgpack.packb(body, use_bin_type=True)
        return data

    @classmethod
    def decode(cls, data: bytes, *, now: float) -> WorkerRecord:
        """The record in ``data``; raises ValueError (Implausible among them)
        naming what is wrong when it does not decode or holds a value no
        worker could have written."""
        try:
            body = msgpack.unpackb(data, raw=False)
        except Exception as exc:
            raise ValueError(f"not a worker record ({type(exc).__name__})") from None
        if not isinstance(body, dict) or body.get("v") != VERSION:
            raise ValueError("not a worker record of a version this release reads")
        runs = body.get("runs")
        if not isinstance(runs, list) or len(runs) > RUNS_LISTED:
            raise plausible.Implausible(f"runs is not a list of at most {RUNS_LISTED} run ids")
        if not all(is_storable_id(run) for run in runs):
            raise plausible.Implausible("runs holds something that is not a run id")
        life = body.get("life")
        if not isinstance(life, str) or not life.isalnum() or len(life) > 32:
            raise plausible.Implausible("life is not a token")
        return cls(
            worker_id=plausible.name(body.get("id"), "id", longest=200),
            host=plausible.name(body.get("host"), "host"),
            pid=plausible.count(body.get("pid"), "pid", least=1, most=2**31 - 1),
            life=life,
            concurrency=plausible.count(body.get("concurrency"), "concurrency", least=1),
            held=plausible.count(body.get("held"), "held"),
            runs=tuple(runs),
            started_at=plausible.time(body.get("started"), "started", now=now, ahead=AGE_OUT),
            beat_at=plausible.time(body.get("beat"), "beat", now=now, ahead=AGE_OUT),
            every=plausible.duration(body.get("every"), "every", least=0.01, most=AGE_OUT),
            stopped_at=plausible.optional_time(
                body.get("stopped"), "stopped", now=now, ahead=AGE_OUT
            ),
        )


def holder_digest(holder: str) -> str:
    """The key segment of a holder's records: hex, whatever the id holds."""
    return hashlib.sha256(holder.encode()).hexdigest()[:32]


class Presence:
    """Keeps one worker's record under ``prefix`` in ``store`` while it runs
    (see the module docstring): every ``every`` seconds, dated by ``clock``."""

    def __init__(
        self, store: ObjectStore, prefix: str, *, clock: Clock, every: float = BEAT
    ) -> None:
        if not 0 < every <= AGE_OUT / 2:
            raise ValueError(
                f"a worker record's beat must be more than 0 and at most {AGE_OUT / 2:g} s, "
                f"got {every}"
            )
        self._store = store
        self._prefix = prefix.rstrip("/") + "/"
        self._clock = clock
        self.every = every
        self._task: asyncio.Task[None] | None = None
        self._worker: Described | None = None
        self._key = ""
        self._started_at = 0.0
        self._failing = False

    @property
    def key(self) -> str:
        """This life's record (empty before the start)."""
        return self._key

    def start(self, worker: Described, *, sole_holder: bool) -> None:
        """Begin beating for ``worker`` (on the running loop). ``sole_holder``:
        it holds its id's lock, so earlier lives under its holder are over."""
        if self._task is not None:
            return
        self._worker = worker
        self._key = f"{self._prefix}{holder_digest(worker.holder)}/{secrets.token_hex(8)}"
        self._started_at = self._clock.now()
        self._task = asyncio.get_running_loop().create_task(
            self._beat(sole_holder), name=f"{worker.worker_id} presence"
        )

    async def stop(self) -> None:
        """Stop beating and write the record once more, stopped (within STOP_WRITE)."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._write(stopped=True), STOP_WRITE)

    async def _beat(self, sole_holder: bool) -> None:
        beats = 0
        sweep_every = max(1, round(SWEEP_EVERY / self.every))
        while True:
            await self._write(stopped=False)
            if beats % sweep_every == 0:
                await self._sweep(sole_holder and beats == 0)
            beats += 1
            await asyncio.sleep(self.every)

    def _record(self, *, stopped: bool) -> WorkerRecord:
        worker = self._worker
        assert worker is not None
        now = self._clock.now()
        runs = [] if stopped else worker.held_runs()
        return WorkerRecord(
            worker_id=worker.worker_id,
            host=socket.gethostname() or "unknown",
            pid=os.getpid(),
            life=self._key.rsplit("/", 1)[-1],
            concurrency=worker.concurrency,
            held=len(runs),
            runs=tuple(runs[:RUNS_LISTED]),
            started_at=self._started_at,
            beat_at=now,
            every=self.every,
            stopped_at=now if stopped else None,
        )

    async def _write(self, *, stopped: bool) -> None:
        try:
            await self._store.put(self._key, self._record(stopped=stopped).encode())
        except Exception as exc:
            if not self._failing:
                log.warning("could not write the worker record %s: %s", self._key, describe(exc))
            self._failing = True
        else:
            self._failing = False

    async def _sweep(self, earlier_lives: bool) -> None:
        """Delete the records not written for AGE_OUT, and with
        ``earlier_lives`` this holder's other records."""
        own = self._key.rsplit("/", 1)[0] + "/"
        cutoff = self._clock.now() - AGE_OUT
        try:
            cursor: str | None = None
            for _ in range(SWEEP_PAGES):
                page = await self._store.list(self._prefix, start_after=cursor)
                for info in page:
                    mine = earlier_lives and info.key.startswith(own) and info.key != self._key
                    if mine or info.modified < cutoff:
                        with contextlib.suppress(NotFound, PreconditionFailed):
                            await self._store.delete(info.key, if_match=info.etag)
                if len(page) < DEFAULT_PAGE_SIZE:
                    return
                cursor = page[-1].key
        except Exception as exc:
            log.warning("could not sweep old worker records: %s", describe(exc))
