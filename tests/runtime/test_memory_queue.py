"""MemoryQueue beyond the shared contract: what it knows for its own process."""

from __future__ import annotations

from stepstone.runtime import FakeClock, MemoryQueue
from stepstone.runtime.decision import Ack, Retry


async def test_pending_here_is_true_from_enqueue_until_the_job_ends() -> None:
    """One process holds the whole queue, so its answer is exact."""
    queue = MemoryQueue(clock=FakeClock())
    await queue.enqueue(b"", id="a", max_attempts=1)
    assert queue.pending_here("a")
    (held,) = await queue.claim(1, lease=30)
    assert queue.pending_here("a")
    await queue.settle(held, Ack())
    assert not queue.pending_here("a")

    await queue.enqueue(b"", id="b", max_attempts=1)
    (held,) = await queue.claim(1, lease=30)
    await queue.settle(held, Retry(0))  # the last attempt failed: dead
    assert not queue.pending_here("b")
    assert not queue.pending_here("never")
