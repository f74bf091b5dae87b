"""Job types and a worker for the SIGKILL tests of streams and callbacks
(``python rel_talk.py`` runs a worker; the tests import the rest).

The worker runs a JobRunner over the store ``REL_ROOT`` names, wrapped in a
:class:`KillingStore` that SIGKILLs the process at the points
``REL_TALK_KILL`` names: ``point=probability`` (each time it is reached, at
those odds) or ``point@n`` (the n-th time this process reaches it), joined
by commas; several such specs joined by ``|`` are taken in turn by the
worker's lives (its life is the number of workers started before it):

``before_item``  a stream write's memo landed; its item is not written
``after_item``   the item landed; the write has not returned
``before_take``  a callback's wait read its completion; what it took is not recorded
``after_take``   what it took is recorded; the completion is not deleted

``REL_CONCURRENCY`` is the worker's concurrency (16).

Event lines (in ``REL_EVENTS``, one ``write()`` each): ``READY pid``,
``KILL point pid key``, ``CALLBACK run attempt id url-or-none`` (each time a
run makes its callback), ``RESUMED run pid value`` (each time a run gets
past its callback's wait).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time
from collections import Counter
from typing import Any, ClassVar

from pydantic import BaseModel
from rel_jobs import emit, env_float, open_rel_store, read_events

from stepstone import Job, JobContext, JobRunner
from stepstone.store import ObjectStore
from stepstone.store.counting import CountingStore
from stepstone.store.parts import Parts

POINTS = ("before_item", "after_item", "before_take", "after_take")


class Writes(Job[int]):
    """Writes ``count`` items ``"<n>:<i>"`` to stream ``tokens``, a few
    milliseconds apart, and closes it."""

    NAME: ClassVar[str] = "rel.talk.writes"
    max_attempts: ClassVar[int | None] = 50
    n: int
    count: int

    def idempotency_key(self) -> str:
        return f"rel-writes:{self.n}"

    async def run(self, ctx: JobContext) -> int:
        tokens = ctx.stream("tokens", str)
        for i in range(self.count):
            await tokens.write(f"{self.n}:{i}")
            await asyncio.sleep(0.005)
        await tokens.close()
        return self.count


class Paid(BaseModel):
    amount: int
    by: str


class AwaitsPayment(Job[str]):
    """Makes callback ``paid`` (says its id and URL), waits for it, and
    returns who paid how much."""

    NAME: ClassVar[str] = "rel.talk.payment"
    max_attempts: ClassVar[int | None] = 50
    n: int

    def idempotency_key(self) -> str:
        return f"rel-payment:{self.n}"

    async def run(self, ctx: JobContext) -> str:
        cb = await ctx.callback("paid", timeout=600, type=Paid)
        emit("CALLBACK", ctx.run_id, ctx.attempt, cb.id, cb.url or "none")
        paid = await cb
        said = f"{paid.amount} by {paid.by}"
        emit("RESUMED", ctx.run_id, os.getpid(), said.replace(" ", "_"))
        return said


TALK_JOBS: list[type[Job[Any]]] = [Writes, AwaitsPayment]


class KillingStore(CountingStore):
    """The store, passed through, killing this process at the kill points."""

    def __init__(self, inner: ObjectStore, spec: str, seed: str) -> None:
        super().__init__(inner)
        self.odds: dict[str, float] = {}
        self.at: dict[str, int] = {}
        self.reached: Counter[str] = Counter()
        for part in filter(None, (p.strip() for p in spec.split(","))):
            point, how, n = part.partition("@") if "@" in part else part.partition("=")
            if point not in POINTS:
                raise ValueError(f"unknown kill point {point!r}; known: {POINTS}")
            if how == "@":
                self.at[point] = int(n)
            else:
                self.odds[point] = float(n)
        self.rng = random.Random(f"{seed}/{os.getpid()}")

    def maybe(self, point: str, key: str) -> None:
        self.reached[point] += 1
        odds = self.odds.get(point, 0.0)
        if (odds and self.rng.random() < odds) or self.at.get(point) == self.reached[point]:
            emit("KILL", point, os.getpid(), key)
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # never reached: SIGKILL cannot be caught

    def _points(self, key: str) -> tuple[str, str] | None:
        if "/streams/" in f"/{key}":
            return "before_item", "after_item"
        if "/!callback@" in key:
            return "before_take", "after_take"
        return None

    async def put_if_absent(self, key: str, data: bytes) -> str:
        points = self._points(key)
        if points is not None:
            self.maybe(points[0], key)
        etag = await super().put_if_absent(key, data)
        if points is not None:
            self.maybe(points[1], key)
        return etag

    async def put_parts(
        self, key: str, parts: Parts, *, if_absent: bool = False, if_match: str | None = None
    ) -> str:
        points = self._points(key)
        if points is not None:
            self.maybe(points[0], key)
        etag = await super().put_parts(key, parts, if_absent=if_absent, if_match=if_match)
        if points is not None:
            self.maybe(points[1], key)
        return etag


def talk_runner(root: str, **kwargs: Any) -> JobRunner:
    """A runner of the talk jobs on ``root`` (a directory or a URL)."""
    return JobRunner(open_rel_store(root), jobs=TALK_JOBS, **kwargs)


async def main() -> int:
    env = os.environ
    lives = env.get("REL_TALK_KILL", "").split("|")
    life = sum(1 for e in read_events(env["REL_EVENTS"]) if e[0] == "READY")
    store = KillingStore(
        open_rel_store(env["REL_ROOT"]), lives[life % len(lives)], env.get("REL_SEED", "0")
    )
    lease = env_float(env, "REL_LEASE", 2.0)
    runner = JobRunner(
        store,
        jobs=TALK_JOBS,
        concurrency=int(env.get("REL_CONCURRENCY", "16")),
        lease=lease,
        retry_backoff=0.05,
        retry_backoff_cap=0.5,
        poll_interval=0.05,
        drain_timeout=2.0,
        callback_look=0.5,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with runner:
        emit("READY", os.getpid())
        await stop.wait()
    await store.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
