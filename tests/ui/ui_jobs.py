"""The jobs whose runs the web view's tests look at."""

from __future__ import annotations

from typing import ClassVar

from stepstone import Job, JobContext, Permanent

HOSTILE = (
    '<script>window.__pwned = 1; document.title = "PWNED"</script>'
    '<img src="x" onerror="window.__pwned = 2">'
    "\x1b[2J\x1b[31mred alert\u202e"
)
"""A job's error message that tries to run script in the page and to clear
an operator's terminal: it must be shown as the text it is."""


class Ship(Job[str]):
    NAME: ClassVar[str] = "orders.ship"
    order: str

    async def run(self, ctx: JobContext) -> str:
        async def pack(order: str) -> dict[str, str]:
            return {"order": order, "box": "medium"}

        async def label(box: dict[str, str]) -> str:
            return f"label-{box['order']}"

        async def send(tracking: str) -> str:
            return f"sent {tracking}"

        box = await ctx.step("pack", pack, self.order)
        ctx.progress({"done": 1, "of": 3})
        tracking = await ctx.step("label", label, box)
        ctx.progress({"done": 2, "of": 3})
        return await ctx.step("send", send, tracking)


class Explode(Job[None]):
    NAME: ClassVar[str] = "orders.explode"

    async def run(self, ctx: JobContext) -> None:
        async def note() -> str:
            return HOSTILE

        await ctx.step("note", note)  # a memo is job-provided text too
        raise Permanent(HOSTILE)


class Nap(Job[str]):
    NAME: ClassVar[str] = "orders.nap"

    async def run(self, ctx: JobContext) -> str:
        await ctx.sleep(86_400)
        return "rested"


class Retried(Job[str]):
    """Fails its first two attempts (hostile text in the error), then succeeds."""

    NAME: ClassVar[str] = "orders.retried"

    async def run(self, ctx: JobContext) -> str:
        async def reserve() -> str:
            return "reserved"

        await ctx.step("reserve", reserve)
        if ctx.attempt < 3:
            raise ConnectionError(f"attempt {ctx.attempt} refused {HOSTILE}")
        return "done"


class Approve(Job[dict[str, object]]):
    """Waits for an ``approval`` event and returns its payload."""

    NAME: ClassVar[str] = "orders.approve"

    async def run(self, ctx: JobContext) -> dict[str, object]:
        payload: dict[str, object] = await ctx.wait_for_event("approval")
        return {"approved": payload}


class Invoice(Job[str]):
    """A keyed job of a second version: found by its key."""

    NAME: ClassVar[str] = "billing.invoice"
    VERSION: ClassVar[str | None] = "v2"
    number: int

    def idempotency_key(self) -> str:
        return f"invoice-{self.number}"

    async def run(self, ctx: JobContext) -> str:
        return f"invoiced {self.number}"


class Patient(Job[str]):
    """Sleeps durably, then waits for an ``approval`` event: its page shows
    both waits as what they were, not as numbers or errors."""

    NAME: ClassVar[str] = "orders.patient"

    async def run(self, ctx: JobContext) -> str:
        await ctx.sleep(0.2)
        approval: dict[str, str] = await ctx.wait_for_event("approval")
        return f"approved by {approval['by']}"


class Hold(Job[str]):
    """Holds its worker until the worker stops (a run a workers page shows held)."""

    NAME: ClassVar[str] = "orders.hold"

    async def run(self, ctx: JobContext) -> str:
        import asyncio

        await asyncio.sleep(3600)
        return "held"


class Sync(Job[str]):
    """What a schedule submits at each tick (the schedules page's runs)."""

    NAME: ClassVar[str] = "inventory.sync"
    at: str

    async def run(self, ctx: JobContext) -> str:
        return f"synced at {self.at}"


class Charge(Job[str]):
    """A payment that the bank declines for good: a dead run as an operator
    meets one, with nothing hostile in it (the sign-in tests' screenshots)."""

    NAME: ClassVar[str] = "payments.charge"
    invoice: str
    cents: int

    async def run(self, ctx: JobContext) -> str:
        async def authorize(cents: int) -> str:
            return f"auth-{self.invoice}"

        await ctx.step("authorize", authorize, self.cents)
        raise Permanent(f"card declined for invoice {self.invoice}: insufficient funds")


class Narrate(Job[dict[str, object]]):
    """Writes ``lines`` to stream ``story`` (hostile text among them), makes
    callback ``go``, and waits for it: returns what came."""

    NAME: ClassVar[str] = "orders.narrate"
    lines: list[str]

    async def run(self, ctx: JobContext) -> dict[str, object]:
        story = ctx.stream("story")
        for line in self.lines:
            await story.write(line)
        await story.write({"chapter": 2, "note": HOSTILE})
        cb = await ctx.callback("go", timeout=86_400)
        came: dict[str, object] = await cb
        await story.close()
        return {"came": came}
