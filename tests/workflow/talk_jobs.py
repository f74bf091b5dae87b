"""Job types that talk with the outside while they run: streams and callbacks
(importable by child processes)."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from pydantic import BaseModel
from wf_jobs import Counters

from stepstone import (
    BadCallback,
    CallbackTimeout,
    Job,
    JobContext,
    StreamClosed,
)


class Token(BaseModel):
    text: str
    n: int


class Tokens(Job[int]):
    """Writes ``count`` tokens to stream ``tokens`` (waiting for event ``more``
    after the first ``pause_after``, if set), closes it if ``close``, returns
    how many it wrote. The first attempt fails after ``fail_after`` writes,
    if set (the retry replays the writes)."""

    NAME: ClassVar[str] = "talk.tokens"
    key: str
    count: int
    pause_after: int | None = None
    fail_after: int | None = None
    close: bool = True

    def idempotency_key(self) -> str:
        return f"tokens:{self.key}"

    async def run(self, ctx: JobContext) -> int:
        counters = ctx.state(Counters)
        tokens = ctx.stream("tokens", Token)
        for n in range(self.count):
            if n == self.pause_after:
                await ctx.wait_for_event("more")
            await tokens.write(Token(text=f"t{n}", n=n))
            counters.hit(f"wrote:{self.key}:{n}")
            if ctx.attempt == 1 and n + 1 == self.fail_after:
                raise RuntimeError("the first attempt fails part way")
        if self.close:
            await tokens.close()
        return self.count


class Branches(Job[int]):
    """``branches`` concurrent tasks, each writing ``each`` items to one
    stream (``b<branch>-<i>``) after random-ish pauses; the first attempt
    fails once every branch has written ``fail_after`` items, if set."""

    NAME: ClassVar[str] = "talk.branches"
    branches: int
    each: int
    fail_after: int | None = None

    async def run(self, ctx: JobContext) -> int:
        mixed = ctx.stream("mixed")
        written = asyncio.Event()
        done = [0] * self.branches

        async def branch(b: int) -> None:
            for i in range(self.each):
                await asyncio.sleep(((b * 7 + i * 3) % 5) / 1000)
                await mixed.write(f"b{b}-{i}")
                done[b] = i + 1
                if self.fail_after is not None and all(d >= self.fail_after for d in done):
                    written.set()

        tasks = [asyncio.create_task(branch(b)) for b in range(self.branches)]
        if ctx.attempt == 1 and self.fail_after is not None:
            await written.wait()
            raise RuntimeError("the first attempt fails with its branches part way")
        await asyncio.gather(*tasks)
        return self.branches * self.each


class Large(Job[int]):
    """Writes a large bytes value, a large str and a small dict."""

    NAME: ClassVar[str] = "talk.large"
    size: int

    async def run(self, ctx: JobContext) -> int:
        blobs = ctx.stream("blobs")
        await blobs.write(bytes(range(256)) * (self.size // 256))
        await blobs.write("x" * self.size)
        await blobs.write({"small": True})
        return self.size


class WritesAfterClose(Job[str]):
    NAME: ClassVar[str] = "talk.after-close"

    async def run(self, ctx: JobContext) -> str:
        stream = ctx.stream("s")
        await stream.write(1)
        await stream.close()
        await stream.close()  # (does nothing)
        try:
            await stream.write(2)
        except StreamClosed as exc:
            return str(exc)
        return "wrote after close"


class Approval(BaseModel):
    approved: bool
    by: str


class AwaitsCallback(Job[str]):
    """Makes callback ``approval`` (of type Approval), hands its id and URL
    out through step ``send`` (into the Counters' ``sent`` list), and waits:
    returns who approved, or what went wrong (a timeout, a bad completion)
    when ``catch`` is set. The first attempt fails after the callback, if
    ``fail_once`` is set."""

    NAME: ClassVar[str] = "talk.callback"
    order: str
    timeout: float | None = 3600.0
    catch: bool = True
    fail_once: bool = False

    def idempotency_key(self) -> str:
        return f"callback:{self.order}"

    async def run(self, ctx: JobContext) -> str:
        counters = ctx.state(Counters)
        cb = await ctx.callback("approval", timeout=self.timeout, type=Approval)
        counters.sent.append((self.order, ctx.attempt, cb.id, cb.url))
        await ctx.step("send", _send, cb.id, cb.url)
        if self.fail_once and ctx.attempt == 1:
            raise RuntimeError("the first attempt fails after making its callback")
        try:
            approval = await cb
        except (CallbackTimeout, BadCallback) as exc:
            if not self.catch:
                raise
            return f"{type(exc).__name__}: {exc}"
        said = f"{'approved' if approval.approved else 'refused'} by {approval.by}"
        return await ctx.step("after", lambda: _after(said, counters))


def _after(said: str, counters: Counters) -> str:
    counters.hit(f"after:{said}")
    return said


def _send(callback_id: str, url: str | None) -> str:
    """What a run would mail to a person or post to a partner's API."""
    return callback_id


class TwoCallbacks(Job[list[Any]]):
    """Two callbacks made by two concurrent branches, awaited together; the
    first attempt fails once both are made."""

    NAME: ClassVar[str] = "talk.two-callbacks"
    order: str

    async def run(self, ctx: JobContext) -> list[Any]:
        counters = ctx.state(Counters)

        async def one(name: str) -> Any:
            cb = await ctx.callback(name, timeout=3600)
            counters.sent.append((f"{self.order}:{name}", ctx.attempt, cb.id, cb.url))
            return cb

        first, second = await asyncio.gather(one("left"), one("right"))
        if ctx.attempt == 1:
            raise RuntimeError("the first attempt fails once both callbacks are made")
        return list(await asyncio.gather(first.wait(), second.wait()))


class SyncTalker(Job[Any]):
    """A synchronous job: writes two lines, makes callback ``ok`` and waits
    for it, through ``ctx.sync``."""

    NAME: ClassVar[str] = "talk.sync"
    order: str

    def run(self, ctx: JobContext) -> Any:
        lines = ctx.sync.stream("lines")
        lines.write("first")
        lines.write("second")
        cb = ctx.sync.callback("ok", timeout=3600)
        ctx.state(Counters).sent.append((self.order, ctx.attempt, cb.id, cb.url))
        came = cb.wait()
        lines.close()
        return came


TALK_JOBS: list[type[Job[Any]]] = [
    Tokens,
    Branches,
    Large,
    WritesAfterClose,
    AwaitsCallback,
    TwoCallbacks,
    SyncTalker,
]
