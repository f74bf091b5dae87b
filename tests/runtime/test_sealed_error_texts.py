"""A worker given ``seal_text`` hands the queue every error text sealed (a
retry's last error with its traceback's end, a dead job's reason, its kind
kept readable), on MemoryQueue and on a StoreQueue over a real directory;
the layer above still hears the failure as it was (it seals its own records).
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stepstone.runtime import (
    Attempt,
    AttemptReport,
    Backoff,
    Delivery,
    Failure,
    FakeClock,
    LeaseQueue,
    MemoryQueue,
    Terminal,
    Worker,
)
from stepstone.runtime.decision import Retry
from stepstone.runtime.status import JobStatus
from stepstone.runtime.store_queue import StoreQueue
from stepstone.store import FileStore, InvalidKey
from stepstone.testing import wait_until

MARKER = "numbat-card-marker"


def seal(text: str) -> str:
    """A sealer the test can undo (the workflow layer's encrypts)."""
    return "[sealed:" + base64.b64encode(text.encode()).decode() + "]"


def unseal(text: str) -> str:
    assert text.startswith("[sealed:") and text.endswith("]"), text
    return base64.b64decode(text[len("[sealed:") : -1]).decode()


@dataclass
class Heard:
    """What the layer above heard: terminal results and attempt reports."""

    terminals: list[Terminal] = field(default_factory=list)
    reports: list[AttemptReport] = field(default_factory=list)
    refuse: bool = False

    async def on_terminal(self, delivery: Delivery, terminal: Terminal) -> None:
        self.terminals.append(terminal)
        if self.refuse:
            raise InvalidKey(f"key refused for {MARKER}", key="outcomes/j")

    async def is_cancelled(self, delivery: Delivery) -> bool:
        return False

    async def attempt_over(self, report: AttemptReport) -> None:
        self.reports.append(report)


@pytest.fixture(params=["memory", "store"])
async def queue(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[LeaseQueue]:
    clock = FakeClock()
    if request.param == "memory":
        yield MemoryQueue(clock=clock)
        return
    store = FileStore(tmp_path)
    try:
        yield StoreQueue(store, prefix="queue/", clock=clock)
    finally:
        await store.close()


async def run_until_dead(queue: LeaseQueue, heard: Heard, max_attempts: int) -> Worker:
    async def handler(attempt: Attempt) -> None:
        raise ValueError(f"card {MARKER} declined on attempt {attempt.attempt}")

    await queue.enqueue(b"", kind="charge", id="j", max_attempts=max_attempts)
    worker = Worker(
        queue,
        callbacks=heard,
        backoff=Backoff(base=0.0, jitter=0.0),
        poll_interval=0.05,
        seal_text=seal,
    )
    worker.register("charge", handler)
    await worker.start()
    await wait_until(lambda: worker.stats.dead == 1, timeout=30, message="the job is dead")
    await worker.stop()
    return worker


async def test_the_queue_keeps_error_texts_sealed(queue: LeaseQueue) -> None:
    heard = Heard()
    await run_until_dead(queue, heard, max_attempts=2)
    record = await queue.get("j")
    assert record is not None and record.status is JobStatus.DEAD
    assert record.last_error is not None and MARKER not in record.last_error
    kept = unseal(record.last_error)  # the first attempt's: message, then traceback
    assert kept.startswith(f"ValueError: card {MARKER} declined on attempt 1\n")
    assert "Traceback" in kept
    assert record.dead_reason is not None and record.dead_reason.startswith("exhausted: [sealed:")
    assert unseal(record.dead_reason.removeprefix("exhausted: ")) == (
        f"ValueError: card {MARKER} declined on attempt 2"
    )
    # The layer above hears the failure as it was: it seals what it writes itself.
    (failure,) = heard.terminals
    assert isinstance(failure, Failure) and MARKER in failure.message
    retried = [r.decision for r in heard.reports if isinstance(r.decision, Retry)]
    assert len(retried) == 1 and MARKER in retried[0].error


async def test_a_result_that_cannot_be_recorded_leaves_its_reason_sealed(
    queue: LeaseQueue,
) -> None:
    heard = Heard(refuse=True)
    await run_until_dead(queue, heard, max_attempts=1)
    record = await queue.get("j")
    assert record is not None and record.status is JobStatus.DEAD
    assert record.dead_reason is not None and MARKER not in record.dead_reason
    reason = unseal(record.dead_reason)
    assert reason.startswith(f"exhausted: ValueError: card {MARKER} declined")
    assert "result not recorded: InvalidKey" in reason
