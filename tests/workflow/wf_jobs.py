"""Job types shared by the workflow tests (importable by child processes)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections import Counter
from typing import Any, ClassVar

from pydantic import BaseModel

from stepstone import Job, JobContext, Permanent


class Counters:
    """Application state: counts executions by name, safe across threads."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.gate = asyncio.Event()
        self.started = asyncio.Event()
        self.sent: list[tuple[str, int, str, str | None]] = []
        """What runs handed out: (who, attempt, callback id, its URL)."""

    def hit(self, name: str) -> int:
        with self._lock:
            self.counts[name] += 1
            return self.counts[name]


class Adder(Job[int]):
    NAME: ClassVar[str] = "test.adder"
    a: int
    b: int

    async def run(self, ctx: JobContext) -> int:
        return self.a + self.b


class Keyed(Job[int]):
    NAME: ClassVar[str] = "test.keyed"
    n: int

    def idempotency_key(self) -> str:
        return f"keyed:{self.n}"

    async def run(self, ctx: JobContext) -> int:
        ctx.state(Counters).hit("keyed")
        return self.n


class FixedKey(Job[str]):
    NAME: ClassVar[str] = "test.fixed-key"
    content: str

    def idempotency_key(self) -> str:
        return "fixed"

    async def run(self, ctx: JobContext) -> str:
        return self.content


class GatedKeyed(Job[int]):
    """Waits on the Counters gate, so a test can submit duplicates while it runs."""

    NAME: ClassVar[str] = "test.gated"
    n: int

    def idempotency_key(self) -> str:
        return f"gated:{self.n}"

    async def run(self, ctx: JobContext) -> int:
        counters = ctx.state(Counters)
        counters.hit("gated")
        counters.started.set()
        await counters.gate.wait()
        return self.n


class KeyedFailure(Job[int]):
    NAME: ClassVar[str] = "test.keyed-failure"
    n: int

    def idempotency_key(self) -> str:
        return f"keyed-failure:{self.n}"

    async def run(self, ctx: JobContext) -> int:
        raise Permanent(f"refusing {self.n}")


class AlwaysFlaky(Job[int]):
    NAME: ClassVar[str] = "test.flaky"

    async def run(self, ctx: JobContext) -> int:
        ctx.state(Counters).hit("flaky")
        raise RuntimeError(f"flaky on attempt {ctx.attempt}")


class MemoThenFail(Job[int]):
    """Step one, then fail the first attempt: the retry must replay step one."""

    NAME: ClassVar[str] = "test.memo-then-fail"
    seed: int

    async def run(self, ctx: JobContext) -> int:
        counters = ctx.state(Counters)

        async def expensive(x: int) -> int:
            counters.hit("expensive")
            return x * 10

        value = await ctx.step("expensive", expensive, self.seed)
        if ctx.attempt == 1:
            raise RuntimeError("fail after the step")
        return value + 1


class Quote(BaseModel):
    cents: int
    currency: str


class TypedSteps(Job[str]):
    NAME: ClassVar[str] = "test.typed-steps"
    order: str

    async def run(self, ctx: JobContext) -> str:
        counters = ctx.state(Counters)

        async def fetch_quote(order: str) -> Quote:
            counters.hit("quote")
            return Quote(cents=500, currency="EUR")

        def pair() -> tuple[int, int]:
            counters.hit("pair")
            return (1, 2)

        quote = await ctx.step("quote", fetch_quote, self.order)
        assert isinstance(quote, Quote), type(quote)
        p = await ctx.step("pair", pair)
        assert p == (1, 2) and isinstance(p, tuple), p
        if ctx.attempt == 1:
            raise RuntimeError("retry me")
        return f"{quote.cents} {quote.currency} {p}"


class RepeatedSteps(Job[list[int]]):
    NAME: ClassVar[str] = "test.repeated-steps"

    async def run(self, ctx: JobContext) -> list[int]:
        counters = ctx.state(Counters)

        async def tick() -> int:
            return counters.hit("tick")

        values = [await ctx.step("tick", tick) for _ in range(3)]
        if ctx.attempt == 1:
            raise RuntimeError("retry me")
        return values


class Coordinator(Job[int]):
    NAME: ClassVar[str] = "test.coordinator"
    children: int

    async def run(self, ctx: JobContext) -> int:
        ctx.state(Counters).hit("coordinator")
        handles = [await ctx.submit(Increment(i=i)) for i in range(self.children)]
        if ctx.attempt == 1:
            raise RuntimeError("the parent retries after submitting its children")
        return sum([await h for h in handles])


class Increment(Job[int]):
    NAME: ClassVar[str] = "test.increment"
    i: int

    async def run(self, ctx: JobContext) -> int:
        ctx.state(Counters).hit("increment")
        return self.i


class Reclaimable(Job[int]):
    """Its first start hangs (as a stalled worker would); the takeover
    answers with the attempt it is on."""

    NAME: ClassVar[str] = "test.reclaimable"

    async def run(self, ctx: JobContext) -> int:
        counters = ctx.state(Counters)
        counters.hit("reclaimable")
        if counters.counts["reclaimable"] == 1:
            counters.started.set()
            await asyncio.Event().wait()
        return ctx.attempt


class ExtendsLease(Job[float]):
    NAME: ClassVar[str] = "test.extends-lease"

    async def run(self, ctx: JobContext) -> float:
        await ctx.lease.ensure_at_least(3600)
        counters = ctx.state(Counters)
        counters.started.set()
        await counters.gate.wait()
        return ctx.lease.expires_at


class SyncJob(Job[int]):
    NAME: ClassVar[str] = "test.sync"
    n: int

    def run(self, ctx: JobContext) -> int:
        assert threading.current_thread() is not threading.main_thread()
        doubled = ctx.sync.step("double", lambda: self.n * 2)
        ctx.sync.progress({"done": 1})
        return doubled + 1


class Unserializable(Job[int]):
    NAME: ClassVar[str] = "test.unserializable-step"

    async def run(self, ctx: JobContext) -> int:
        await ctx.step("bad", lambda: object())
        return 1


class Progressing(Job[int]):
    NAME: ClassVar[str] = "test.progressing"

    async def run(self, ctx: JobContext) -> int:
        for i in range(5):
            ctx.progress({"done": i + 1, "of": 5})
        return 5


class Pid(Job[int]):
    NAME: ClassVar[str] = "test.pid"
    key: str

    def idempotency_key(self) -> str:
        return self.key

    async def run(self, ctx: JobContext) -> int:
        log = os.environ.get("STEPSTONE_TEST_LOG")
        if log:
            line = f"{ctx.run_id} {os.getpid()}\n"
            await asyncio.to_thread(_append, log, line)
        return os.getpid()


def _append(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line)


class KeyedStep(Job[int]):
    """One step whose value is the number of times it has ever executed."""

    NAME: ClassVar[str] = "test.keyed-step"
    n: int

    def idempotency_key(self) -> str:
        return f"keyed-step:{self.n}"

    async def run(self, ctx: JobContext) -> int:
        counters = ctx.state(Counters)

        async def count() -> int:
            return counters.hit("keyed-step")

        return await ctx.step("count", count)


class ZombieStep(Job[str]):
    """Its step blocks on the Counters gate in its first start (a stalled
    worker); each start says which it was."""

    NAME: ClassVar[str] = "test.zombie-step"

    async def run(self, ctx: JobContext) -> str:
        counters = ctx.state(Counters)
        counters.hit("zombie-start")
        start = counters.counts["zombie-start"]

        async def work() -> str:
            counters.hit("zombie-step")
            if start == 1:
                counters.started.set()
                await counters.gate.wait()
            return f"written by start {start}"

        value = await ctx.step("work", work)
        counters.counts[f"start {start} saw: {value}"] += 1
        return value


class BadResult(Job[Any]):
    NAME: ClassVar[str] = "test.bad-result"

    async def run(self, ctx: JobContext) -> Any:
        return object()


class ProgressThenFail(Job[int]):
    NAME: ClassVar[str] = "test.progress-then-fail"

    async def run(self, ctx: JobContext) -> int:
        ctx.progress({"done": 3, "of": 10})
        raise Permanent("gave up at 3")


class Capped(Job[int]):
    """At most two at once per worker; records the peak it saw."""

    NAME: ClassVar[str] = "test.capped"
    max_in_flight: ClassVar[int | None] = 2
    i: int

    async def run(self, ctx: JobContext) -> int:
        counters = ctx.state(Counters)
        now = counters.hit("capped-in-flight") - counters.counts["capped-done"]
        counters.counts["capped-peak"] = max(counters.counts["capped-peak"], now)
        await asyncio.sleep(0.01)
        counters.hit("capped-done")
        return self.i


class SlowWithTimeout(Job[int]):
    NAME: ClassVar[str] = "test.slow-timeout"
    attempt_timeout: ClassVar[float | None] = 5.0
    max_attempts: ClassVar[int | None] = 1

    async def run(self, ctx: JobContext) -> int:
        ctx.state(Counters).started.set()
        await asyncio.Event().wait()
        return 0


RUNNER_JOBS: list[type[Job[Any]]] = [
    Adder,
    AlwaysFlaky,
    Coordinator,
    ExtendsLease,
    FixedKey,
    GatedKeyed,
    Increment,
    Keyed,
    KeyedFailure,
    KeyedStep,
    MemoThenFail,
    Progressing,
    RepeatedSteps,
    SyncJob,
    TypedSteps,
    Unserializable,
]
"""The job types the shared ``runner`` fixture registers."""
