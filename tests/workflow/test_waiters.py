"""Waiters, events and families: every waiter of a run is woken when it
ends, an event is taken once by one wait and wakes only a run waiting for
one, a child's failure reaches its parent at once, and a family lives and
is cancelled together.

Time is a FakeClock. Each scenario runs on the MemoryQueue, and on the
StoreQueue over memory, a real directory and moto's S3.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from family_jobs import (
    FAMILY_JOBS,
    FanOut,
    GatedParent,
    GoesOnEvent,
    Joins,
    LetsChildFail,
    Tag,
    TakesOrder,
    TwoAtOnce,
    WaitsOddly,
)
from wf_jobs import Counters
from wf_support import ON_EVERY_STORE

from stepstone import EncodingError, EventRefused, JobCancelled, JobRunner, JobStatus, SubmitOptions
from stepstone.testing import FakeClock, advance, run_job, wait_until

pytestmark = ON_EVERY_STORE


@pytest.fixture
def make_family(make_runner: Callable[..., JobRunner]) -> Callable[..., JobRunner]:
    def make(**kwargs: object) -> JobRunner:
        kwargs.setdefault("jobs", FAMILY_JOBS)
        kwargs.setdefault("concurrency", 1)
        return make_runner(**kwargs)

    return make


async def _status(runner: JobRunner, run_id: str) -> JobStatus | None:
    state = await runner.status(run_id)
    return None if state is None else state.status


async def test_an_event_does_not_start_a_run_before_its_run_at(
    make_family: Callable[..., JobRunner], clock: FakeClock, counters: Counters
) -> None:
    async with make_family() as runner:
        later = SubmitOptions(run_at=datetime.fromtimestamp(clock.now() + 20, UTC))
        handle = await runner.submit(GoesOnEvent(key="later"), later)
        await runner.send_event(handle.id, "go", 1)
        # Concurrency 1: had the event made the run due, the worker would have
        # taken it (due earlier) before this one.
        assert await run_job(runner, Tag(tag="after")) == "after"
        assert counters.counts.get("goes:later", 0) == 0
        assert await _status(runner, handle.id) is JobStatus.SCHEDULED
        await advance(clock, 20)
        assert await handle.result(timeout=10) == 1
    assert counters.counts["goes:later"] == 1


async def test_concurrent_waits_for_one_name_take_distinct_events(
    make_family: Callable[..., JobRunner], clock: FakeClock, counters: Counters
) -> None:
    api = make_family(jobs=[])
    sent_first = await api.submit(TwoAtOnce(key="sent-first"))
    await api.send_event(sent_first.id, "x", "e1")
    await advance(clock, 1)
    await api.send_event(sent_first.id, "x", "e2")
    async with make_family() as runner:
        assert await sent_first.result(timeout=10) == ["e1", "e2"]
        # Waiting first, the events arriving one by one (a replay each time).
        waiting = await runner.submit(TwoAtOnce(key="waiting"))
        await wait_until(lambda: _is(runner, waiting.id, JobStatus.WAITING_FOR_EVENT))
        await runner.send_event(waiting.id, "x", "e3")
        await wait_until(lambda: counters.counts["two-at-once:waiting"] >= 2)
        await wait_until(lambda: _is(runner, waiting.id, JobStatus.WAITING_FOR_EVENT))
        await advance(clock, 1)
        await runner.send_event(waiting.id, "x", "e4")
        assert await waiting.result(timeout=10) == ["e3", "e4"]


async def test_every_waiter_of_a_run_is_woken_when_it_ends(
    make_family: Callable[..., JobRunner],
) -> None:
    """A parent that joins a child an API submitted, and two that join a
    child a third parent created: each resumes when its child ends, not
    after the hour a lost wake would cost."""
    async with make_family(concurrency=4) as runner:
        rates = await runner.submit(GoesOnEvent(key="rates"))  # from an API
        joiner = await runner.submit(Joins(child="rates", who="joiner"))
        await wait_until(lambda: _is(runner, joiner.id, JobStatus.WAITING_FOR_CHILDREN))
        await runner.send_event(rates.id, "go", "r")
        assert await joiner.result(timeout=10) == "r"

        creator = await runner.submit(Joins(child="shared", who="creator"))
        await wait_until(lambda: _is(runner, creator.id, JobStatus.WAITING_FOR_CHILDREN))
        late = [await runner.submit(Joins(child="shared", who=f"late-{i}")) for i in range(2)]
        for handle in late:
            await wait_until(lambda h=handle: _is(runner, h.id, JobStatus.WAITING_FOR_CHILDREN))
        shared = runner.handle(GoesOnEvent(key="shared"))
        await runner.send_event(shared.id, "go", "s")
        assert [await h.result(timeout=10) for h in (creator, *late)] == ["s", "s", "s"]


async def test_a_childs_permanent_failure_fails_its_parent_at_once_naming_it(
    make_family: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_family(max_attempts=60) as runner:
        parent = await runner.submit(LetsChildFail(key="p"))
        outcome = await parent.join(timeout=10)
    assert outcome.status is JobStatus.FAILED and outcome.error is not None
    assert (outcome.error.reason, outcome.attempts) == ("permanent", 1)
    assert "child 1 refuses" in outcome.error.message
    assert outcome.error.error_type is not None and "JobFailed" in outcome.error.error_type
    assert counters.counts["refuses:1"] == 1
    assert counters.counts["lets-fail:p"] == 2  # submitted, then woken: not retried


@pytest.mark.parametrize(
    ("wait", "how", "says"),
    [
        ("sleep", "1e12", "9999"),
        ("sleep", "1e300", "9999"),
        ("sleep", "-1", ">= 0"),
        ("sleep", "nan", ">= 0"),
        ("sleep", "inf", ">= 0"),
        ("event", "-1", ">= 0"),
        ("event", "nan", ">= 0"),
        ("event", "1e12", "9999"),
    ],
)
async def test_a_wait_it_cannot_keep_fails_the_run_at_once_saying_why(
    make_family: Callable[..., JobRunner], counters: Counters, wait: str, how: str, says: str
) -> None:
    async with make_family() as runner:
        outcome = await (await runner.submit(WaitsOddly(wait=wait, how=how))).join(timeout=10)
    assert outcome.status is JobStatus.FAILED and outcome.error is not None
    assert (outcome.error.reason, outcome.attempts) == ("permanent", 1)
    assert says in outcome.error.message and repr(float(how)) in outcome.error.message
    assert outcome.error.error_type is not None and "InvalidWait" in outcome.error.error_type
    assert counters.counts[f"oddly:{wait}:{how}"] == 1


async def test_an_event_payload_that_cannot_be_stored_raises_encoding_error(
    make_family: Callable[..., JobRunner],
) -> None:
    api = make_family(jobs=[])
    handle = await api.submit(GoesOnEvent(key="lambda"))
    with pytest.raises(EncodingError, match="'go'"):
        await api.send_event(handle.id, "go", lambda: 1)
    with pytest.raises(EncodingError, match="'go'"):
        await api.send_event(handle.id, "go", {"when": object()})


async def test_an_event_of_another_type_fails_the_run_once_naming_run_event_and_field(
    make_family: Callable[..., JobRunner], counters: Counters
) -> None:
    api = make_family(jobs=[])
    handle = await api.submit(TakesOrder(key="bad"))
    await api.send_event(handle.id, "order", {"sku": "a-1", "cents": "lots"})
    async with make_family(max_attempts=5):
        outcome = await handle.join(timeout=10)
    assert outcome.status is JobStatus.FAILED and outcome.error is not None
    assert (outcome.error.reason, outcome.attempts) == ("permanent", 1)
    message = outcome.error.message
    assert handle.id in message and "'order'" in message and "cents" in message
    assert counters.counts["takes-order:bad"] == 1


async def _children_waiting(runner: JobRunner, who: str, n: int) -> list[str]:
    ids = [runner.handle(GoesOnEvent(key=f"{who}-{i}")).id for i in range(n)]
    for run_id in ids:
        await wait_until(lambda r=run_id: _is(runner, r, JobStatus.WAITING_FOR_EVENT))
    return ids


async def test_cancelling_a_parent_cancels_its_live_children(
    make_family: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_family(concurrency=4) as runner:
        parent = await runner.submit(FanOut(who="p", n=12))
        children = await _children_waiting(runner, "p", 12)
        await wait_until(lambda: _is(runner, parent.id, JobStatus.WAITING_FOR_CHILDREN))
        api = make_family(jobs=[])  # another process, no worker
        assert await api.cancel(parent.id) is True
        for child in children:
            outcome = await runner.handle(child, GoesOnEvent).join(timeout=10)
            assert outcome.status is JobStatus.CANCELLED and outcome.error is not None
            assert outcome.error.message == f"the job was cancelled with its parent {parent.id}"
            with pytest.raises(EventRefused):
                await runner.send_event(child, "go", 1)
        with pytest.raises(JobCancelled):
            await parent.result(timeout=10)
    assert all(counters.counts[f"goes:p-{i}"] == 1 for i in range(12))  # none resumed


async def test_a_cancel_reaches_grandchildren_and_can_leave_children_running(
    make_family: Callable[..., JobRunner],
) -> None:
    async with make_family(concurrency=4) as runner:
        nested = await runner.submit(FanOut(who="n", n=2, nested=True))
        left = await runner.submit(FanOut(who="l", n=2))
        grandchildren = [
            *(await _children_waiting(runner, "n-0", 2)),
            *(await _children_waiting(runner, "n-1", 2)),
        ]
        kept = await _children_waiting(runner, "l", 2)
        assert await runner.cancel(nested.id) is True
        for run_id in grandchildren:
            outcome = await runner.handle(run_id, GoesOnEvent).join(timeout=10)
            assert outcome.status is JobStatus.CANCELLED
        assert await left.cancel(leave_children=True) is True
        for run_id in kept:
            await runner.send_event(run_id, "go", run_id[:4])
            assert await runner.handle(run_id, GoesOnEvent).result(timeout=10) == run_id[:4]


async def test_a_cancel_leaves_a_child_the_parent_joined(
    make_family: Callable[..., JobRunner],
) -> None:
    async with make_family(concurrency=4) as runner:
        shared = await runner.submit(GoesOnEvent(key="not-theirs"))  # from an API
        joiner = await runner.submit(Joins(child="not-theirs", who="j"))
        await wait_until(lambda: _is(runner, joiner.id, JobStatus.WAITING_FOR_CHILDREN))
        assert await runner.cancel(joiner.id) is True
        assert await _status(runner, shared.id) is JobStatus.WAITING_FOR_EVENT
        await runner.send_event(shared.id, "go", "still")
        assert await shared.result(timeout=10) == "still"


async def test_a_child_created_as_its_parent_is_cancelled_is_cancelled_too(
    make_family: Callable[..., JobRunner], counters: Counters
) -> None:
    """The parent runs in a worker that has not heard of the cancel yet (no
    cancellation checks here) when the cancel lists its children: the child
    it creates next is cancelled by its own submit."""
    async with make_family(cancel_check=None) as runner:
        parent = await runner.submit(GatedParent(who="g"))
        await counters.started.wait()
        api = make_family(jobs=[])
        assert await api.cancel(parent.id) is True
        counters.gate.set()
        late = runner.handle(GoesOnEvent(key="late-g"))
        await wait_until(lambda: _is_finished(runner, late.id), timeout=10)
        assert (await late.join(timeout=10)).status is JobStatus.CANCELLED
    assert counters.counts.get("gated-submitted:g", 0) == 0
    assert counters.counts.get("goes:late-g", 0) == 0


async def _is_finished(runner: JobRunner, run_id: str) -> bool:
    state = await runner.status(run_id)
    return state is not None and state.status.finished


async def test_a_send_with_a_key_is_one_event_however_often_it_is_retried(
    make_family: Callable[..., JobRunner], clock: FakeClock
) -> None:
    api = make_family(jobs=[])
    handle = await api.submit(TwoAtOnce(key="webhook"))
    assert await api.send_event(handle.id, "x", "first", key="delivery-1") is True
    await advance(clock, 1)
    # The answer was lost: the caller sends again (another payload even).
    assert await api.send_event(handle.id, "x", "first", key="delivery-1") is False
    assert await api.send_event(handle.id, "x", "again", key="delivery-1") is False
    await advance(clock, 1)
    assert await api.send_event(handle.id, "y", "other name", key="delivery-1") is True
    assert await api.send_event(handle.id, "x", "second", key="delivery-2") is True
    async with make_family():
        assert await handle.result(timeout=10) == ["first", "second"]


async def _is(runner: JobRunner, run_id: str, status: JobStatus) -> bool:
    return await _status(runner, run_id) is status
