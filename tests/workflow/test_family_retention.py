"""Retention and families: a child's outcome outlives every live parent
that waits on it (the one that created it, the ones that joined it), so a
parent's replay takes the recorded answer and never runs the child again.

The sweep compares the stores' modified times with the window, so the
scenarios run on stores that take the FakeClock's time: a MemoryStore under
the MemoryQueue and under the StoreQueue.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from family_jobs import FAMILY_JOBS, ChildThenEvent, Counted
from wf_jobs import Counters

from stepstone import JobRunner, JobStatus, SubmitOptions
from stepstone.records.retention import sweep
from stepstone.testing import FakeClock, advance, wait_until

DAY = 86_400.0


async def _is(runner: JobRunner, run_id: str, status: JobStatus) -> bool:
    state = await runner.status(run_id)
    return state is not None and state.status is status


async def test_retention_spares_the_children_of_a_live_parent(
    make_runner: Callable[..., JobRunner], clock: FakeClock, counters: Counters
) -> None:
    """A parent outlives the retention window after its child ended (a
    week-long approval, a day's window): the child it created, and the keyed
    child it joined, stay until it ends, so its replay does not run them again."""
    async with make_runner(jobs=FAMILY_JOBS, concurrency=2) as runner:
        keyed = await runner.submit(Counted(key="shared-rates", tag="shared"))
        assert await keyed.result(timeout=10) == 1
        created = await runner.submit(ChildThenEvent(who="creator"))
        await runner.submit(  # the keyed child, made by an API before the joiner's submit
            Counted(key="joined-rates", tag="joined-rates"),
            SubmitOptions(run_at=datetime.fromtimestamp(clock.now() + 5, UTC)),
        )
        joiner = await runner.submit(ChildThenEvent(who="joiner", child_key="joined-rates"))
        await wait_until(lambda: _is(runner, joiner.id, JobStatus.WAITING_FOR_CHILDREN))
        await advance(clock, 5)
        for parent in (created, joiner):
            await wait_until(lambda p=parent: _is(runner, p.id, JobStatus.WAITING_FOR_EVENT))
        await advance(clock, 7 * DAY)
        assert await sweep(runner, retention=DAY) == 1  # the shared run, nobody's child
        assert await runner.status(keyed.id) is None
        for parent in (created, joiner):
            await runner.send_event(parent.id, "go", None)
            assert await parent.result(timeout=10) == 1  # the child did not run again
        assert counters.counts["counted:creator"] == counters.counts["counted:joined-rates"] == 1
        await advance(clock, DAY)
        assert await sweep(runner, retention=DAY) == 4  # their parents have ended
