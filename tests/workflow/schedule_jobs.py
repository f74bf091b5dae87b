"""A scheduled job that stays live until it is let go (an event), for the
overlap policies' tests."""

from __future__ import annotations

from typing import ClassVar

from wf_jobs import Counters

from stepstone import Job, JobContext


class HeldTick(Job[str]):
    """Counts its start, waits for the event ``done``, counts its end."""

    NAME: ClassVar[str] = "sched.held"
    at: str

    async def run(self, ctx: JobContext) -> str:
        counters = ctx.state(Counters)
        await ctx.step("start", lambda: counters.hit(f"start:{self.at}"))
        await ctx.wait_for_event("done")
        await ctx.step("end", lambda: counters.hit(f"end:{self.at}"))
        return self.at


SCHEDULE_JOBS: list[type[Job[str]]] = [HeldTick]
