"""What is held with a lease (a concurrency slot) is renewed after it and
apart from it: a slow renewal of the slot, an object many processes write,
never holds up the lease's own, and the slot's loss still loses the lease."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from stepstone.runtime import FakeClock, MemoryQueue
from stepstone.runtime.worker.lease import Lease
from stepstone.testing import wait_until


async def _held(clock: FakeClock) -> tuple[Lease, list[str]]:
    queue = MemoryQueue(clock=clock)
    await queue.enqueue(b"", id="run")
    (delivery,) = await queue.claim(1, lease=30)
    lost: list[str] = []
    return Lease(delivery, queue, clock, lambda: lost.append("lost")), lost


async def _until(condition: Callable[[], object], what: str) -> None:
    """Wait (really) until ``condition`` holds; fail the test if it never does."""
    await wait_until(condition, timeout=30, interval=0.001, message=what)


async def test_a_slow_slot_renewal_does_not_hold_up_the_lease() -> None:
    clock = FakeClock()
    lease, lost = await _held(clock)
    slow = asyncio.Event()
    calls: list[float] = []

    async def extend_slot(until: float) -> bool:
        calls.append(until)
        await slow.wait()  # the slot object takes its writes slowly
        return True

    lease.also_renew(extend_slot)
    async with asyncio.timeout(1):  # the lease renewed, its slot's renewal under way
        assert await lease.renew(30)
    first = lease.expires_at
    await _until(lambda: calls, "the slot's renewal began")
    clock.advance(10)
    async with asyncio.timeout(1):  # not behind the slot's renewal
        assert await lease.renew(30)
    assert lease.expires_at == first + 10
    assert calls == [first]  # one renewal's slot write at a time
    slow.set()
    await _until(lambda: lease._extending is not None and lease._extending.done(), "done")
    assert await lease.renew(30)
    await _until(lambda: len(calls) == 2, "the next renewal renews the slot again")
    assert calls[1] == lease.expires_at
    assert not lost and not lease.lost


async def test_a_slot_taken_over_loses_the_lease() -> None:
    lease, lost = await _held(FakeClock())

    async def taken_over(until: float) -> bool:
        return False

    lease.also_renew(taken_over)
    assert await lease.renew(30)  # the queue's own renewal went through
    await _until(lambda: lease.lost, "the slot's answer arrived")
    assert lost == ["lost"]
    assert not await lease.renew(30)


async def test_a_failed_slot_renewal_is_logged_and_tried_at_the_next_renewal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lease, lost = await _held(FakeClock())
    answers = [RuntimeError("store down"), True]
    calls = 0

    async def flaky(until: float) -> bool:
        nonlocal calls
        calls += 1
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    lease.also_renew(flaky)
    with caplog.at_level(logging.WARNING, logger="stepstone.runtime.worker"):
        assert await lease.renew(30)
        await _until(lambda: lease._extending is not None and lease._extending.done(), "done")
    assert "store down" in caplog.text and "job run" in caplog.text
    assert await lease.renew(30)
    await _until(lambda: calls == 2, "tried again")
    assert not lost


async def test_a_released_slot_is_not_renewed_after_its_release() -> None:
    lease, lost = await _held(FakeClock())
    gate = asyncio.Event()
    renewed: list[str] = []

    async def first_thing(until: float) -> bool:
        await gate.wait()
        return True

    async def slot(until: float) -> bool:
        renewed.append("slot")
        return False  # a released slot's renewal would find no entry

    lease.also_renew(first_thing)
    stop_slot = lease.also_renew(slot)
    assert await lease.renew(30)
    stop_slot()  # the run released its slot while the renewal was under way
    gate.set()
    await _until(lambda: lease._extending is not None and lease._extending.done(), "done")
    assert renewed == [] and not lost
