"""Job types, a tapping store and a skewed clock for the reliability tests.

Imported by the tests (parent process) and by ``rel_worker.py`` (the worker
processes they start), so everything here is configured from the
environment of the process it runs in:

``REL_EVENTS``   path of the shared event log (one ``O_APPEND`` file; every
                 line is one ``write()``, so lines from many processes never
                 interleave and their order is the order they happened in)
``REL_KILL``     ``point=probability,...``: where a worker kills itself with
                 SIGKILL (see :data:`KILL_POINTS`)
``REL_SEED``     seed for the kill draws (mixed with the pid)
``REL_STEP_SLEEP`` seconds each step of :class:`ThreeSteps` takes
``REL_BRANCHES`` set: :class:`ThreeSteps` runs its steps as three concurrent
                 branches, each after a random pause
``REL_GATE``     a path: the first attempt of :class:`Gated` waits inside its
                 first step until this file exists
``REL_LOOK_GATE`` a path: a run that has looked for its events (listed them)
                 waits until this file exists before it goes on: the moment
                 between a wait's look and its suspension, held open

Event lines (space separated, first word the event):

``EXEC run step pid token``             a step function ran (its side effect)
``MEMO-WRITING|MEMO-WROTE|MEMO-EXISTS run step pid token``  a memo write
``OUTCOME-WRITING|OUTCOME-WROTE|OUTCOME-EXISTS run pid``    an outcome write
``CLAIMING|CLAIM run pid claims``      a claim is about to be written / landed
``LOOKED run pid``                      a run listed its events (see REL_LOOK_GATE)
``KILL point pid key``                  a worker about to SIGKILL itself
``PKILL pid``                           the parent SIGKILLed a worker
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import secrets
import signal
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import msgpack

from stepstone import Job, JobContext, Permanent
from stepstone.records.calls import PositionedMemo
from stepstone.records.layout import position_of
from stepstone.runtime.store_queue.records import CorruptRecord, decode
from stepstone.store import AlreadyExists, FileStore, ObjectStore, open_store
from stepstone.store.base import DEFAULT_PAGE_SIZE, ObjectInfo, StoredObject

KILL_POINTS = (
    "in_step",  # inside a step, after its side effect, before it returns
    "before_memo",  # the step ran; its memo is not written yet
    "after_memo",  # the memo landed; the step has not returned
    "before_outcome",  # the run finished; its outcome is not written yet
    "after_outcome",  # the outcome landed; the queue record is not acked yet
    "after_claim",  # a claim landed; the handler has not started
    "before_suspend",  # a run is about to give its claim back to wait (sleep, event, children)
)

_fd: int | None = None
_fd_path: str | None = None


def emit(*words: object) -> None:
    """Append one event line to ``REL_EVENTS`` (a no-op when it is not set)."""
    global _fd, _fd_path
    path = os.environ.get("REL_EVENTS")
    if not path:
        return
    if _fd is None or _fd_path != path:
        _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _fd_path = path
    os.write(_fd, (" ".join(str(w) for w in words) + "\n").encode())


def read_events(path: str) -> list[list[str]]:
    try:
        with open(path, encoding="utf-8") as f:
            return [line.split() for line in f if line.strip()]
    except FileNotFoundError:
        return []


class Killer:
    """Decides, per kill point, whether this process dies now."""

    def __init__(self, spec: str | None = None, seed: str | None = None) -> None:
        spec = os.environ.get("REL_KILL", "") if spec is None else spec
        self.odds: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            point, _, p = part.partition("=")
            if point not in KILL_POINTS:
                raise ValueError(f"unknown kill point {point!r}; known: {KILL_POINTS}")
            self.odds[point] = float(p)
        seed = os.environ.get("REL_SEED", "0") if seed is None else seed
        self.rng = random.Random(f"{seed}/{os.getpid()}")

    def maybe(self, point: str, detail: str = "-") -> None:
        odds = self.odds.get(point, 0.0)
        if odds and self.rng.random() < odds:
            emit("KILL", point, os.getpid(), detail)
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # never reached: SIGKILL cannot be caught


_killer: Killer | None = None


def killer() -> Killer:
    global _killer
    if _killer is None:
        _killer = Killer()
    return _killer


def _memo_parts(key: str, data: bytes) -> tuple[str, str] | None:
    """(run, step) of a memo ``[prefix/]memos/<run>/<inc>/#<position>`` (its
    step named inside it) or ``.../<step>`` (keyed by name)."""
    parts = key.split("/")
    if len(parts) >= 4 and parts[-4] == "memos":
        if position_of(parts[-1]) is None:
            return parts[-3], parts[-1]
        try:
            return parts[-3], PositionedMemo.decode(data).call.name
        except ValueError:
            return parts[-3], parts[-1]
    return None


def _outcome_run(key: str) -> str | None:
    parts = key.split("/")
    if len(parts) >= 2 and parts[-2] == "outcomes":
        return parts[-1]
    return None


def _token_of(data: bytes) -> str:
    """The execution token inside a memo value written by :func:`effect`."""
    try:
        value = msgpack.unpackb(data, raw=False)
        if isinstance(value, dict) and "pos" in value:  # (a memo of the run's history)
            value = msgpack.unpackb(PositionedMemo.decode(data).value, raw=False)
    except Exception:
        return "?"
    return value.rsplit(":", 1)[-1] if isinstance(value, str) else "?"


class TapStore(ObjectStore):
    """Passes every call to ``inner``; logs memo, outcome and claim writes and
    kills the process at the configured points around them."""

    def __init__(self, inner: ObjectStore, kill: Killer | None = None) -> None:
        self.inner = inner
        self.location = inner.location
        self.key_limit = inner.key_limit
        self.kill = kill or killer()
        self.pid = os.getpid()

    async def get(self, key: str) -> StoredObject:
        return await self.inner.get(key)

    async def head(self, key: str) -> ObjectInfo:
        return await self.inner.head(key)

    async def put(self, key: str, data: bytes) -> str:
        return await self.inner.put(key, data)

    async def put_if_absent(self, key: str, data: bytes) -> str:
        memo = _memo_parts(key, data)
        run = _outcome_run(key)
        if memo is not None:
            token = _token_of(data)
            self.kill.maybe("before_memo", key)
            emit("MEMO-WRITING", *memo, self.pid, token)
            try:
                etag = await self.inner.put_if_absent(key, data)
            except AlreadyExists:
                emit("MEMO-EXISTS", *memo, self.pid, token)
                raise
            emit("MEMO-WROTE", *memo, self.pid, token)
            self.kill.maybe("after_memo", key)
            return etag
        if run is not None:
            self.kill.maybe("before_outcome", key)
            emit("OUTCOME-WRITING", run, self.pid)
            try:
                etag = await self.inner.put_if_absent(key, data)
            except AlreadyExists:
                emit("OUTCOME-EXISTS", run, self.pid)
                raise
            emit("OUTCOME-WROTE", run, self.pid)
            self.kill.maybe("after_outcome", key)
            return etag
        return await self.inner.put_if_absent(key, data)

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        job = None
        if "/jobs/" in key:
            with contextlib.suppress(CorruptRecord):
                job = decode(data, key=key)
        # A claim writes a token this process has not written for the job
        # before (a renewal keeps it; a settlement drops it).
        claim = job is not None and job.token is not None and _tokens.get(job.id) != job.token
        if job is not None and job.token is None and job.wait is not None:
            self.kill.maybe("before_suspend", key)
        if claim:
            assert job is not None
            emit("CLAIMING", job.id, self.pid, job.claims)
        new = await self.inner.put_if_match(key, data, etag)
        if job is not None:
            _tokens[job.id] = job.token
        if claim:
            assert job is not None
            emit("CLAIM", job.id, self.pid, job.claims)
            self.kill.maybe("after_claim", key)
        return new

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        await self.inner.delete(key, if_match=if_match)

    async def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int = DEFAULT_PAGE_SIZE
    ) -> list[ObjectInfo]:
        page = await self.inner.list(prefix, start_after=start_after, limit=limit)
        parts = prefix.split("/")
        gate = os.environ.get("REL_LOOK_GATE", "")
        if gate and parts[-5:-4] == ["events"]:  # events/<run>/<incarnation>/<name>/
            emit("LOOKED", parts[-4], self.pid)
            # The gate is a file another process creates: poll it.
            while not await asyncio.to_thread(os.path.exists, gate):  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        return page

    async def close(self) -> None:
        await self.inner.close()


_tokens: dict[str, str | None] = {}
"""The token this process last wrote into each job's record."""


class SkewedClock:
    """The system clock, off by ``offset`` seconds (a worker whose clock is wrong)."""

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def now(self) -> float:
        return time.time() + self.offset

    def __repr__(self) -> str:
        return f"SkewedClock({self.offset:+g})"


# -- the jobs -----------------------------------------------------------------


async def effect(run: str, step: str) -> str:
    """A step's side effect: append ``EXEC`` to the event log, then return a
    value that names this execution, so a memo shows which execution won."""
    token = secrets.token_hex(6)
    pid = os.getpid()
    emit("EXEC", run, step, pid, token)
    pause = float(os.environ.get("REL_STEP_SLEEP", "0") or 0)
    if pause:
        await asyncio.sleep(pause)
    killer().maybe("in_step", f"{run}/{step}")
    return f"{step}:{pid}:{token}"


STEPS = ("a", "b", "c")


class ThreeSteps(Job[list[str]]):
    """Three memoized steps; the result is the three recorded step values."""

    NAME: ClassVar[str] = "rel.three-steps"
    max_attempts: ClassVar[int | None] = 1000
    n: int

    def idempotency_key(self) -> str:
        return f"rel-three-steps:{self.n}"

    async def run(self, ctx: JobContext) -> list[str]:
        if not os.environ.get("REL_BRANCHES"):
            return [await ctx.step(step, effect, ctx.run_id, step) for step in STEPS]

        async def branch(step: str) -> str:  # (REL_BRANCHES: each step a branch of its own)
            await asyncio.sleep(random.random() * 0.01)  # (so they start in any order)
            value: str = await ctx.step(step, effect, ctx.run_id, step)
            return value

        return list(await asyncio.gather(*(branch(step) for step in STEPS)))


async def _gate(run: str, step: str) -> str:
    """Like :func:`effect`, but in a worker given ``REL_GATE`` it waits for that file to exist."""
    token = secrets.token_hex(6)
    emit("EXEC", run, step, os.getpid(), token)
    gate = os.environ.get("REL_GATE", "")
    # The gate is a file another process creates: poll it.
    while gate and not await asyncio.to_thread(os.path.exists, gate):  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    return f"{step}:{os.getpid()}:{token}"


class Gated(Job[list[str]]):
    """Three steps; a worker given ``REL_GATE`` holds in the first until the gate file appears."""

    NAME: ClassVar[str] = "rel.gated"
    max_attempts: ClassVar[int | None] = 10
    n: int

    def idempotency_key(self) -> str:
        return f"rel-gated:{self.n}"

    async def run(self, ctx: JobContext) -> list[str]:
        first = await ctx.step("a", _gate, ctx.run_id, "a")
        rest = [await ctx.step(step, effect, ctx.run_id, step) for step in ("b", "c")]
        return [first, *rest]


class Normal(Job[int]):
    """An ordinary job: the canary that says the worker still works."""

    NAME: ClassVar[str] = "rel.normal"
    n: int

    async def run(self, ctx: JobContext) -> int:
        doubled = await ctx.step("double", _double, self.n)
        return doubled + 1


async def _double(n: int) -> int:
    return n * 2


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this exception cannot be printed")


class UnprintablePermanent(Permanent):
    def __str__(self) -> str:
        raise RuntimeError("this exception cannot be printed either")


class RaisesUnprintable(Job[int]):
    """Raises an exception whose ``str()`` raises: transient, or permanent."""

    NAME: ClassVar[str] = "rel.raises-unprintable"
    max_attempts: ClassVar[int | None] = 2
    permanent: bool = False

    async def run(self, ctx: JobContext) -> int:
        if self.permanent:
            raise UnprintablePermanent()
        raise Unprintable()


class ClassifiesUnprintable(Job[int]):
    """Raises an unprintable error that its ``classify`` calls permanent."""

    NAME: ClassVar[str] = "rel.classifies-unprintable"
    max_attempts: ClassVar[int | None] = 3

    def classify(self, error: BaseException) -> Any:
        from stepstone import ErrorClass

        return ErrorClass.PERMANENT

    async def run(self, ctx: JobContext) -> int:
        emit("EXEC", ctx.run_id, "run", os.getpid(), ctx.attempt)
        raise Unprintable()


class Opaque:
    """Not a value any codec can store."""


class BadResult(Job[Any]):
    NAME: ClassVar[str] = "rel.bad-result"

    async def run(self, ctx: JobContext) -> Any:
        return Opaque()


class Blob(Job[bytes]):
    """Echoes a bytes field (any bytes, not only UTF-8) and a text field."""

    NAME: ClassVar[str] = "rel.blob"
    data: bytes
    text: str = ""

    async def run(self, ctx: JobContext) -> bytes:
        return self.data


class DotSteps(Job[list[str]]):
    """Steps whose names try to climb out of the store's root."""

    NAME: ClassVar[str] = "rel.dot-steps"
    names: list[str]

    async def run(self, ctx: JobContext) -> list[str]:
        return [await ctx.step(name, _echo, name) for name in self.names]


async def _echo(name: str) -> str:
    return name


ALL_JOBS: tuple[type[Job[Any]], ...] = (
    ThreeSteps,
    Gated,
    Normal,
    RaisesUnprintable,
    ClassifiesUnprintable,
    BadResult,
    Blob,
    DotSteps,
)


def open_rel_store(where: str) -> ObjectStore:
    """The store the tests name: a directory (made if need be, as
    FileStore(path) does) or a URL (``s3://...``)."""
    return open_store(where) if "://" in where else FileStore(where)


def env_float(env: Mapping[str, str], name: str, default: float) -> float:
    value = env.get(name, "")
    return float(value) if value else default


class Plain3(Job[list[str]]):
    """ThreeSteps with the runner's default max_attempts: for the store-fault
    runs, where a transient store error must not burn the job's attempts."""

    NAME: ClassVar[str] = "rel.plain3"
    n: int

    def idempotency_key(self) -> str:
        return f"rel-plain3:{self.n}"

    async def run(self, ctx: JobContext) -> list[str]:
        if not os.environ.get("REL_BRANCHES"):
            return [await ctx.step(step, effect, ctx.run_id, step) for step in STEPS]

        async def branch(step: str) -> str:  # (REL_BRANCHES: each step a branch of its own)
            await asyncio.sleep(random.random() * 0.01)  # (so they start in any order)
            value: str = await ctx.step(step, effect, ctx.run_id, step)
            return value

        return list(await asyncio.gather(*(branch(step) for step in STEPS)))


ALL_JOBS = (*ALL_JOBS, Plain3)
