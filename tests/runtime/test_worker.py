"""The worker loop against MemoryQueue and a FakeClock.

Time that matters to the queue (run-at, backoff, lease expiry, attempt
timeouts) is moved with the FakeClock. Real waiting is only ever "until this
condition holds, or fail at a deadline" (:func:`until`), never a sleep that
hopes something happened.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Mapping,
    Sequence,
    Sized,
)
from dataclasses import dataclass, field
from typing import Any

import pytest

from stepstone.runtime import (
    Attempt,
    AttemptReport,
    AttemptResult,
    Backoff,
    Clock,
    Delivery,
    Failure,
    FailureKind,
    FakeClock,
    IdleHints,
    JobRecord,
    JobStatus,
    LeaseLost,
    LeaseQueue,
    MemoryQueue,
    OnTerminal,
    Permanent,
    RetryLater,
    Settlement,
    Success,
    Terminal,
    Worker,
)
from stepstone.runtime.decision import Ack, Dead, Decision, Release, Retry
from stepstone.runtime.queue import DEFAULT_MAX_ATTEMPTS, Enqueued, NewJob
from stepstone.store.errors import InvalidKey, StoreError, StoreUnavailable
from stepstone.testing import wait_until

NO_BACKOFF = Backoff(base=0.0, jitter=0.0)


async def until(
    condition: Callable[[], bool | Awaitable[bool]], what: str, within: float = 30.0
) -> None:
    """Wait (really) until ``condition`` holds; fail if it does not ``within`` seconds."""
    await wait_until(condition, timeout=within, interval=0.002, message=what)


def has_length(items: Sized, n: int) -> Callable[[], bool]:
    return lambda: len(items) == n


@dataclass
class Reported:
    """What on_terminal heard, and the job's queue status at that moment."""

    calls: list[tuple[Delivery, Terminal, JobStatus | None]] = field(default_factory=list)

    def of(self, job_id: str) -> list[Terminal]:
        return [terminal for d, terminal, _ in self.calls if d.id == job_id]


@dataclass
class OnTerminalOnly:
    """Attempt callbacks that hear terminal results and nothing else: no job
    is ever found cancelled, nothing is written when an attempt is over."""

    terminal: OnTerminal

    async def on_terminal(self, delivery: Delivery, terminal: Terminal) -> None:
        await self.terminal(delivery, terminal)

    async def is_cancelled(self, delivery: Delivery) -> bool:
        return False

    async def attempt_over(self, report: AttemptReport) -> None:
        return None


@dataclass
class Env:
    clock: FakeClock
    queue: MemoryQueue
    reported: Reported
    workers: list[Worker]

    def worker(self, **kwargs: Any) -> Worker:
        async def on_terminal(delivery: Delivery, terminal: Terminal) -> None:
            record = await self.queue.get(delivery.id)
            status = None if record is None else record.status
            self.reported.calls.append((delivery, terminal, status))

        kwargs.setdefault("poll_interval", 0.05)
        kwargs.setdefault("backoff", NO_BACKOFF)
        terminal = kwargs.pop("on_terminal", on_terminal)
        callbacks = None if terminal is None else OnTerminalOnly(terminal)
        worker = Worker(
            kwargs.pop("queue", self.queue), clock=self.clock, callbacks=callbacks, **kwargs
        )
        self.workers.append(worker)
        return worker

    async def record(self, job_id: str) -> JobRecord | None:
        return await self.queue.get(job_id)

    async def status(self, job_id: str) -> JobStatus | None:
        record = await self.queue.get(job_id)
        return None if record is None else record.status


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    clock = FakeClock()
    environment = Env(clock, MemoryQueue(clock=clock), Reported(), [])
    yield environment
    for worker in environment.workers:
        await worker.stop(drain_timeout=0)


# -- concurrency -----------------------------------------------------------------------


async def test_never_more_handlers_in_flight_than_the_concurrency(env: Env) -> None:
    active = peak = done = 0

    async def handler(attempt: Attempt) -> None:
        nonlocal active, peak, done
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.001)
        active -= 1
        done += 1

    for i in range(50):
        await env.queue.enqueue(b"", kind="work", id=f"j{i:02}")
    worker = env.worker(concurrency=4)
    worker.register("work", handler)
    await worker.start()
    await until(lambda: worker.stats.succeeded == 50, "all 50 jobs ran and were acked")
    assert done == 50
    assert peak == 4 and worker.stats.peak_in_flight == 4
    assert (await env.queue.list()).records == []


async def test_a_capped_kind_never_exceeds_its_cap_while_others_use_the_slots(env: Env) -> None:
    active: dict[str, int] = {"capped": 0, "free": 0}
    peak = dict(active)
    release = asyncio.Event()

    def handler_for(kind: str) -> Callable[[Attempt], Awaitable[None]]:
        async def handler(attempt: Attempt) -> None:
            active[kind] += 1
            peak[kind] = max(peak[kind], active[kind])
            await release.wait()
            active[kind] -= 1

        return handler

    for i in range(10):
        await env.queue.enqueue(b"", kind="capped", id=f"c{i}")
        await env.queue.enqueue(b"", kind="free", id=f"f{i}")
    worker = env.worker(concurrency=8)
    worker.register("capped", handler_for("capped"), max_in_flight=2)
    worker.register("free", handler_for("free"))
    await worker.start()
    await until(lambda: worker.in_flight == 8, "every slot is busy")
    assert active == {"capped": 2, "free": 6}
    release.set()
    await until(lambda: worker.stats.succeeded == 20, "all 20 jobs ran")
    assert peak["capped"] == 2
    assert peak["free"] >= 6


# -- failures and retries --------------------------------------------------------------


async def test_a_permanent_failure_is_dead_after_one_attempt(env: Env) -> None:
    calls = 0

    async def handler(attempt: Attempt) -> None:
        nonlocal calls
        calls += 1
        raise Permanent("card declined")

    await env.queue.enqueue(b"", kind="charge", id="j")
    worker = env.worker()
    worker.register("charge", handler)
    await worker.start()
    await until(lambda: worker.stats.dead == 1, "the job is dead")
    record = await env.record("j")
    assert record is not None and record.status is JobStatus.DEAD
    assert record.attempts == 1 and calls == 1
    assert record.dead_reason == "permanent: Permanent: card declined"
    [failure] = env.reported.of("j")
    assert isinstance(failure, Failure) and failure.traceback is not None
    assert failure.traceback.endswith("stepstone.runtime.errors.Permanent: card declined")
    assert 'raise Permanent("card declined")' in failure.traceback
    assert dataclasses.replace(failure, traceback=None) == Failure(
        FailureKind.PERMANENT,
        "Permanent: card declined",
        "stepstone.runtime.errors.Permanent",
        1,
    )


async def test_transient_failures_are_dead_at_max_attempts_with_the_last_error(env: Env) -> None:
    async def handler(attempt: Attempt) -> None:
        raise ConnectionError(f"reset on attempt {attempt.attempt}")

    await env.queue.enqueue(b"", kind="fetch", id="j", max_attempts=3)
    worker = env.worker()
    worker.register("fetch", handler)
    await worker.start()
    await until(lambda: worker.stats.dead == 1, "the job is dead")
    assert worker.stats.retried == 2
    record = await env.record("j")
    assert record is not None and record.attempts == 3
    assert record.dead_reason == "exhausted: ConnectionError: reset on attempt 3"
    [failure] = env.reported.of("j")
    assert isinstance(failure, Failure)
    assert failure.reason is FailureKind.EXHAUSTED
    assert failure.message == "ConnectionError: reset on attempt 3"
    assert failure.error_type == "ConnectionError"
    assert failure.attempt == 3


async def test_retries_wait_exactly_the_backoff_when_jitter_is_zero(env: Env) -> None:
    """Each nack's run_at is now + base * 2**(attempt-1), capped; the job is not
    claimed again until the clock gets there."""
    attempts: list[int] = []
    markers: list[str] = []

    async def handler(attempt: Attempt) -> None:
        attempts.append(attempt.attempt)
        raise TimeoutError("upstream slow")

    async def marker(attempt: Attempt) -> None:
        markers.append(attempt.run_id)

    await env.queue.enqueue(b"", kind="k", id="j", max_attempts=4)
    worker = env.worker(backoff=Backoff(base=10.0, cap=25.0, jitter=0.0))
    worker.register("k", handler)
    worker.register("marker", marker)
    await worker.start()
    for attempt, delay in [(1, 10.0), (2, 20.0), (3, 25.0)]:

        async def scheduled(n: int = attempt) -> bool:
            record = await env.record("j")
            return record is not None and record.attempts == n and record.lease_expires_at is None

        await until(scheduled, f"attempt {attempt} was nacked")
        record = await env.record("j")
        assert record is not None and record.status is JobStatus.SCHEDULED
        assert record.run_at == env.clock.now() + delay
        env.clock.advance(delay - 0.5)
        # A marker job claimed after the advance proves the worker looked.
        await env.queue.enqueue(b"", kind="marker", id=f"m{attempt}")
        await until(has_length(markers, attempt), "the worker looked again")
        assert attempts == list(range(1, attempt + 1)), "claimed before its run-at"
        env.clock.advance(0.5)
    await until(lambda: worker.stats.dead == 1, "the fourth attempt failed for good")
    assert attempts == [1, 2, 3, 4]


async def test_a_sync_handler_runs_in_a_thread_and_its_crash_is_one_failed_attempt(
    env: Env,
) -> None:
    threads: list[int] = []

    def handler(attempt: Attempt) -> str:
        threads.append(threading.get_ident())
        if attempt.attempt == 1:
            raise RuntimeError("crashed in the thread")
        return "ok"

    await env.queue.enqueue(b"", kind="sync", id="j")
    worker = env.worker()
    worker.register("sync", handler)
    await worker.start()
    await until(lambda: worker.stats.succeeded == 1, "the second attempt succeeded")
    assert threading.get_ident() not in threads and len(threads) == 2
    assert worker.stats.retried == 1
    [success] = env.reported.of("j")
    assert success == Success("ok")


async def test_a_handler_raising_cancelled_error_is_a_failed_attempt_not_a_dead_loop(
    env: Env,
) -> None:
    async def handler(attempt: Attempt) -> str:
        if attempt.attempt == 1:
            raise asyncio.CancelledError()
        return "second time lucky"

    await env.queue.enqueue(b"", kind="k", id="j")
    worker = env.worker()
    worker.register("k", handler)
    await worker.start()
    await until(lambda: worker.stats.succeeded == 1, "the retry succeeded")
    assert worker.stats.retried == 1
    # and the loop is still claiming
    await env.queue.enqueue(b"", kind="k", id="later")
    await until(lambda: worker.stats.succeeded == 2, "a later job ran")


async def test_a_job_of_an_unregistered_kind_is_dead_with_a_clear_reason(env: Env) -> None:
    await env.queue.enqueue(b"", kind="mail.send", id="j")
    worker = env.worker()
    worker.register("other", lambda attempt: None)
    await worker.start()
    await until(lambda: worker.stats.dead == 1, "the job is dead")
    record = await env.record("j")
    assert record is not None
    assert record.dead_reason == "unknown: no handler registered for job type `mail.send`"
    [failure] = env.reported.of("j")
    assert isinstance(failure, Failure) and failure.reason is FailureKind.UNKNOWN


async def test_retry_later_reschedules_without_spending_an_attempt(env: Env) -> None:
    seen: list[int] = []

    async def handler(attempt: Attempt) -> str:
        seen.append(attempt.attempt)
        if len(seen) < 3:
            raise RetryLater(30.0, reason="rate limited")
        return "done"

    await env.queue.enqueue(b"", kind="k", id="j", max_attempts=1)
    worker = env.worker()
    worker.register("k", handler)
    await worker.start()

    def retried(count: int) -> Callable[[], bool]:
        return lambda: worker.stats.retried == count

    for n in (1, 2):
        await until(retried(n), f"deferral {n}")
        record = await env.record("j")
        assert record is not None
        assert record.attempts == 0 and record.run_at == env.clock.now() + 30.0
        assert record.last_error == "RetryLater: rate limited"
        env.clock.advance(30.0)
    await until(lambda: worker.stats.succeeded == 1, "it ran at last")
    assert seen == [1, 1, 1], "a deferral spent an attempt"


async def test_an_attempt_timeout_is_a_counted_failure_then_a_timeout_failure(env: Env) -> None:
    cancelled = 0

    async def handler(attempt: Attempt) -> None:
        nonlocal cancelled
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled += 1
            raise

    await env.queue.enqueue(b"", kind="slow", id="j", max_attempts=2)
    worker = env.worker(attempt_timeout=999.0)
    worker.register("slow", handler, timeout=5.0)
    await worker.start()
    await until(lambda: worker.in_flight == 1, "the first attempt runs")
    env.clock.advance(5.0)
    await until(lambda: worker.stats.retried == 1, "the first attempt timed out")
    record = await env.record("j")
    assert record is not None and record.attempts in (1, 2)
    assert record.last_error == "TimeoutError: attempt 1 timed out after 5s"
    await until(lambda: worker.in_flight == 1, "the second attempt runs")
    env.clock.advance(5.0)
    await until(lambda: worker.stats.dead == 1, "the second attempt timed out")
    assert cancelled == 2
    [failure] = env.reported.of("j")
    assert isinstance(failure, Failure) and failure.reason is FailureKind.TIMEOUT


# -- on_terminal -----------------------------------------------------------------------


async def test_on_terminal_hears_the_result_before_the_job_is_acked_or_dead(env: Env) -> None:
    async def handler(attempt: Attempt) -> object:
        if attempt.payload == b"bad":
            raise Permanent("no")
        return {"answer": 42}

    await env.queue.enqueue(b"good", kind="k", id="good")
    await env.queue.enqueue(b"bad", kind="k", id="bad")
    worker = env.worker()
    worker.register("k", handler)
    await worker.start()
    await until(lambda: len(env.reported.calls) == 2, "both results were reported")
    await until(lambda: worker.stats.succeeded + worker.stats.dead == 2, "both settled")
    by_id = {d.id: (terminal, status) for d, terminal, status in env.reported.calls}
    assert by_id["good"] == (Success({"answer": 42}), JobStatus.RUNNING)
    failure, status = by_id["bad"]
    assert isinstance(failure, Failure) and failure.reason is FailureKind.PERMANENT
    assert status is JobStatus.RUNNING
    assert await env.record("good") is None
    assert await env.status("bad") is JobStatus.DEAD


async def test_when_on_terminal_meets_a_store_outage_the_job_runs_again_uncounted(
    env: Env,
) -> None:
    runs: list[int] = []
    reports = 0

    async def handler(attempt: Attempt) -> str:
        runs.append(attempt.attempt)
        return "result"

    async def on_terminal(delivery: Delivery, terminal: Terminal) -> None:
        nonlocal reports
        reports += 1
        if reports == 1:
            raise StoreUnavailable("outcome store unavailable")

    await env.queue.enqueue(b"", kind="k", id="j")
    worker = env.worker(on_terminal=on_terminal, backoff=Backoff(base=7.0, jitter=0.0))
    worker.register("k", handler)
    await worker.start()
    await until(lambda: worker.stats.retried == 1, "the job was handed back")
    record = await env.record("j")
    assert record is not None and record.status is JobStatus.SCHEDULED
    assert record.attempts == 0, "a failed report spent the job's attempt"
    assert record.run_at == env.clock.now() + 7.0
    assert record.last_error == "result not recorded: StoreUnavailable: outcome store unavailable"
    env.clock.advance(7.0)
    await until(lambda: worker.stats.succeeded == 1, "the rerun was reported and acked")
    assert runs == [1, 1] and reports == 2
    assert await env.record("j") is None


@pytest.mark.parametrize("ends", ["returns", "fails"])
async def test_when_on_terminal_fails_for_another_reason_the_job_is_dead_at_once(
    env: Env, ends: str
) -> None:
    """A result that cannot be recorded for a reason other than an outage
    (an undecodable object at its key, a key the store refuses) would fail
    the same way on every claim: the job is dead after one, with the reason."""
    reports = 0

    async def handler(attempt: Attempt) -> str:
        if ends == "fails":
            raise Permanent("no")
        return "result"

    async def on_terminal(delivery: Delivery, terminal: Terminal) -> None:
        nonlocal reports
        reports += 1
        raise InvalidKey("key too long", key="outcomes/j")

    await env.queue.enqueue(b"", kind="k", id="j")
    worker = env.worker(on_terminal=on_terminal)
    worker.register("k", handler)
    await worker.start()
    await until(lambda: worker.stats.dead == 1, "the job was dead-lettered")
    record = await env.record("j")
    assert record is not None and record.status is JobStatus.DEAD
    assert record.dead_reason is not None
    assert "result not recorded: InvalidKey: key too long (outcomes/j)" in record.dead_reason
    if ends == "fails":
        assert record.dead_reason.startswith("permanent: Permanent: no")
    assert reports == 1 and worker.stats.claimed == 1


# -- leases, zombies and fencing -------------------------------------------------------


async def test_a_zombie_token_changes_nothing_after_another_worker_reclaimed(env: Env) -> None:
    """The zombie is made the way production makes one: claim, let the lease
    lapse, reclaim. Every transition with the old token is refused."""
    await env.queue.enqueue(b"", kind="k", id="j")
    [zombie] = await env.queue.claim(1, lease=10.0)
    env.clock.advance(10.5)
    [owner] = await env.queue.claim(1, lease=60.0)
    assert owner.id == "j" and (owner.attempt, owner.lapses) == (zombie.attempt, 1)
    assert owner.token != zombie.token
    before = await env.record("j")

    assert await env.queue.settle(zombie, Ack()) is Settlement.LOST
    assert await env.queue.settle(zombie, Retry(0.0)) is Settlement.LOST
    assert await env.queue.settle(zombie, Retry(0.0, count=False)) is Settlement.LOST
    assert await env.queue.settle(zombie, Dead("stale")) is Settlement.LOST
    assert await env.queue.settle(zombie, Release()) is Settlement.LOST
    assert await env.queue.renew(zombie, 600.0) is None
    assert await env.record("j") == before

    # The owner's own token still works, so the refusals were about the token.
    assert await env.queue.renew(owner, 600.0) == env.clock.now() + 600.0
    assert await env.queue.settle(owner, Ack()) is Settlement.ACKED


async def test_a_worker_whose_lease_lapsed_settles_nothing_and_reports_nothing(env: Env) -> None:
    """Worker A hangs past its lease (no heartbeat); worker B takes the job over
    and finishes it. When A's handler finally returns, A neither reports a
    result nor acks: the job was B's."""
    release_a = asyncio.Event()

    async def slow(attempt: Attempt) -> str:
        await release_a.wait()
        return "from the zombie"

    async def fast(attempt: Attempt) -> str:
        return "from the owner"

    await env.queue.enqueue(b"", kind="k", id="j")
    a = env.worker(lease=10.0, heartbeat=0, concurrency=1, worker_id="a")
    a.register("k", slow)
    await a.start()
    await until(lambda: a.in_flight == 1, "A runs the job")
    env.clock.advance(11.0)
    b = env.worker(lease=10.0, worker_id="b")
    b.register("k", fast)
    await b.start()
    await until(lambda: b.stats.succeeded == 1, "B finished the job")
    release_a.set()
    await until(lambda: a.in_flight == 0, "A's handler returned")
    assert a.stats.lost == 1 and a.stats.succeeded == 0
    assert [t for t in env.reported.of("j")] == [Success("from the owner")]
    assert await env.record("j") is None


async def test_a_handler_whose_lease_is_lost_is_cancelled_and_nothing_is_settled(
    env: Env,
) -> None:
    cancelled = asyncio.Event()

    async def handler(attempt: Attempt) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    await env.queue.enqueue(b"", kind="k", id="j")
    worker = env.worker(lease=10.0, heartbeat=0.01)
    worker.register("k", handler)
    await worker.start()
    await until(lambda: worker.in_flight == 1, "the job runs")
    # The process stalls past its lease (the clock jumps), and another worker
    # reclaims the job before this one's next heartbeat.
    env.clock.advance(11.0)
    [other] = await env.queue.claim(1, lease=60.0)
    assert (other.attempt, other.lapses) == (1, 1)
    await until(cancelled.is_set, "the handler was cancelled")
    await until(lambda: worker.in_flight == 0, "the job left the worker")
    assert worker.stats.lost == 1
    assert worker.stats.retried == worker.stats.dead == worker.stats.succeeded == 0
    record = await env.record("j")
    assert record is not None and record.status is JobStatus.RUNNING
    assert (record.attempts, record.lapses) == (1, 1)
    assert env.reported.calls == []
    assert await env.queue.settle(other, Ack()) is Settlement.ACKED


async def test_the_heartbeat_keeps_a_long_handler_its_job(env: Env) -> None:
    release = asyncio.Event()

    async def handler(attempt: Attempt) -> str:
        await release.wait()
        return "long"

    await env.queue.enqueue(b"", kind="k", id="j")
    worker = env.worker(lease=10.0, heartbeat=0.01)
    worker.register("k", handler)
    await worker.start()
    await until(lambda: worker.in_flight == 1, "the job runs")
    for _ in range(5):
        env.clock.advance(6.0)  # past the first lease after two steps

        async def renewed() -> bool:
            record = await env.record("j")
            assert record is not None and record.lease_expires_at is not None
            return record.lease_expires_at == env.clock.now() + 10.0

        await until(renewed, "the heartbeat renewed the lease")
    assert await env.queue.claim(1, lease=60.0) == []
    release.set()
    await until(lambda: worker.stats.succeeded == 1, "it finished and was acked")


async def test_a_kind_with_a_longer_lease_is_renewed_to_it_as_it_starts_and_kept(
    env: Env,
) -> None:
    """A job type that may stall longer than the worker's lease allows says
    so (``register(lease=)``, ``Job.lease``): its claims hold that lease,
    renewed every third of it, while other kinds keep the worker's."""
    release = asyncio.Event()

    async def handler(attempt: Attempt) -> None:
        await release.wait()

    await env.queue.enqueue(b"", kind="slow", id="s")
    await env.queue.enqueue(b"", kind="k", id="j")
    worker = env.worker(lease=10.0)
    worker.register("slow", handler, lease=120.0)
    worker.register("k", handler)
    await worker.start()
    await until(lambda: worker.in_flight == 2, "both run")
    start = env.clock.now()

    async def leased(run_id: str, seconds: float) -> bool:
        record = await env.record(run_id)
        assert record is not None and record.lease_expires_at is not None
        return record.lease_expires_at == start + seconds

    await until(lambda: leased("s", 120.0), "the slow kind renewed to its own lease")
    assert await leased("j", 10.0)
    env.clock.advance(60.0)  # the worker's lease lapsed long ago; the kind's did not
    assert [d.id for d in await env.queue.claim(2, lease=10.0)] == ["j"]
    release.set()


def test_a_lease_that_is_not_positive_is_refused(env: Env) -> None:
    with pytest.raises(ValueError, match="lease must be positive"):
        env.worker().register("k", lambda attempt: None, lease=0)


async def test_ensure_at_least_extends_the_queues_lease(env: Env) -> None:
    expiries: list[float] = []
    lost: list[str] = []

    async def handler(attempt: Attempt) -> None:
        expiries.append(attempt.lease.expires_at)
        await attempt.lease.ensure_at_least(5.0)  # 10 s left: nothing to do
        expiries.append(attempt.lease.expires_at)
        await attempt.lease.ensure_at_least(300.0)
        expiries.append(attempt.lease.expires_at)
        record = await env.queue.get(attempt.run_id)
        assert record is not None
        expiries.append(record.lease_expires_at or 0.0)
        await env.queue.cancel(attempt.run_id)
        try:
            await attempt.lease.ensure_at_least(900.0)
        except LeaseLost:
            lost.append("lost")
            raise

    now = env.clock.now()
    await env.queue.enqueue(b"", kind="k", id="j")
    worker = env.worker(lease=10.0, heartbeat=0)
    worker.register("k", handler)
    await worker.start()
    await until(lambda: bool(lost), "the cancelled job's lease was found lost")
    assert expiries == [now + 10.0, now + 10.0, now + 300.0, now + 300.0]
    await until(lambda: worker.in_flight == 0, "the job left the worker")
    assert worker.stats.lost == 1 and env.reported.calls == []


async def test_a_run_whose_workers_die_under_it_is_not_charged_an_attempt(env: Env) -> None:
    """Three workers die under a run on its only attempt (each lease lapses
    and the next worker takes it over): the fourth runs it, still attempt 1
    of 1, and it succeeds."""
    ran: list[tuple[int, int]] = []

    async def handler(attempt: Attempt) -> str:
        ran.append((attempt.attempt, attempt.delivery.lapses))
        return "done"

    await env.queue.enqueue(b"", kind="k", id="j", max_attempts=1)
    for _ in range(3):
        await env.queue.claim(1, lease=10.0)  # a worker that then died
        env.clock.advance(11.0)
    worker = env.worker()
    worker.register("k", handler)
    await worker.start()
    await until(lambda: worker.stats.succeeded == 1, "the run succeeded")
    assert ran == [(1, 3)]


async def test_a_run_whose_leases_lapsed_max_lapses_times_is_dead_as_expired_without_running(
    env: Env,
) -> None:
    ran = False

    async def handler(attempt: Attempt) -> None:
        nonlocal ran
        ran = True

    await env.queue.enqueue(b"", kind="k", id="j", max_attempts=3)
    for _ in range(2):
        await env.queue.claim(1, lease=10.0)  # a worker that then died
        env.clock.advance(11.0)
    worker = env.worker(max_lapses=2)
    worker.register("k", handler)
    await worker.start()
    await until(lambda: worker.stats.dead == 1, "the job is dead")
    assert not ran
    [failure] = env.reported.of("j")
    message = (
        "its lease lapsed 2 times (its workers died or hung under it), "
        "the most a run is given (2), on attempt 1"
    )
    assert failure == Failure(FailureKind.EXPIRED, message, None, 1)
    record = await env.record("j")
    assert record is not None
    assert record.dead_reason == f"expired: {message}"
    assert (record.attempts, record.lapses) == (1, 2)


# -- scheduling ------------------------------------------------------------------------


async def test_higher_priority_runs_first(env: Env) -> None:
    order: list[str] = []

    async def handler(attempt: Attempt) -> None:
        order.append(attempt.run_id)

    await env.queue.enqueue(b"", kind="k", id="low", priority=9)
    await env.queue.enqueue(b"", kind="k", id="normal", priority=5)
    await env.queue.enqueue(b"", kind="k", id="high", priority=0)
    worker = env.worker(concurrency=1)
    worker.register("k", handler)
    await worker.start()
    await until(lambda: len(order) == 3, "all three ran")
    assert order == ["high", "normal", "low"]


async def test_a_stream_of_urgent_work_does_not_starve_a_low_priority_job(
    env: Env,
) -> None:
    """MemoryQueue places a job at due + priority * aging. With aging 1 s and
    a new urgent job arriving every second, the priority-9 job must run once
    it has waited about 9 s, while urgent jobs are still coming."""
    queue = MemoryQueue(clock=env.clock, priority_aging=1.0)
    order: list[str] = []
    start = env.clock.now()

    async def handler(attempt: Attempt) -> None:
        order.append(attempt.run_id)
        if attempt.run_id.startswith("high") and len(order) < 40:
            env.clock.advance(1.0)
            await queue.enqueue(b"", kind="k", id=f"high-{len(order)}", priority=0)

    await queue.enqueue(b"", kind="k", id="low", priority=9)
    await queue.enqueue(b"", kind="k", id="high-0", priority=0)
    worker = env.worker(queue=queue, concurrency=1)
    worker.register("k", handler)
    await worker.start()
    await until(lambda: len(order) >= 40, "the stream ran")
    ran_at = order.index("low")
    assert 5 <= ran_at <= 11, order
    assert env.clock.now() - start > 9 * 1.0 + 5, "urgent work stopped coming"


async def test_a_run_at_job_waits_for_its_time_then_runs_at_once(env: Env) -> None:
    ran: list[str] = []

    async def handler(attempt: Attempt) -> None:
        ran.append(attempt.run_id)

    # A long poll interval: only the clock's wake-up can make it run promptly.
    worker = env.worker(poll_interval=60.0)
    worker.register("k", handler)
    await worker.start()
    await env.queue.enqueue(b"", kind="k", id="later", run_at=env.clock.now() + 100.0)
    await env.queue.enqueue(b"", kind="k", id="now")
    await until(lambda: ran == ["now"], "the due job ran (the worker is awake)")
    env.clock.advance(99.0)
    await env.queue.enqueue(b"", kind="k", id="now-2")
    await until(lambda: ran == ["now", "now-2"], "another due job ran")
    assert await env.status("later") is JobStatus.SCHEDULED
    env.clock.advance(1.0)
    await until(lambda: ran == ["now", "now-2", "later"], "the scheduled job ran on time")


async def test_an_idle_worker_wakes_at_once_on_enqueue(env: Env) -> None:
    worker = env.worker(poll_interval=60.0)
    worker.register("k", lambda attempt: "ok")
    await worker.start()
    await asyncio.sleep(0)  # let it go idle
    await env.queue.enqueue(b"", kind="k", id="j")
    await until(lambda: worker.stats.succeeded == 1, "the job ran", within=2.0)


# -- jobs handed over as they are submitted ---------------------------------------------


async def _claimed_here(queue: MemoryQueue, job_id: str) -> Delivery:
    """A job enqueued claimed, to hand to the worker (as a submit here does)."""
    _, delivery = await queue.enqueue_claimed(NewJob(b"", kind="k", id=job_id), lease=60)
    assert delivery is not None
    return delivery


async def test_a_worker_takes_a_job_handed_over_only_with_a_free_slot_and_nothing_waiting(
    env: Env,
) -> None:
    release = asyncio.Event()

    async def handler(attempt: Attempt) -> None:
        await release.wait()

    worker = env.worker(concurrency=2, poll_interval=60.0)
    worker.register("k", handler)
    assert not worker.ready_for("k")  # not started
    await worker.start()
    await until(lambda: worker.ready_for("k"), "its first claim found the queue empty")
    assert not worker.ready_for("other")  # nobody registered it

    await env.queue.enqueue(b"", kind="k", id="waiting")
    assert not worker.ready_for("k")  # a job waits: it is claimed first
    await until(lambda: worker.in_flight == 1 and worker.ready_for("k"), "it was claimed")

    assert worker.take(await _claimed_here(env.queue, "handed"))
    assert worker.in_flight == 2 and not worker.ready_for("k")  # full
    assert not worker.take(await _claimed_here(env.queue, "refused"))
    release.set()
    await until(lambda: worker.stats.succeeded == 2, "both ran and were acked")
    assert await env.status("handed") is None
    await worker.stop()
    assert not worker.ready_for("k")


async def _status_is(queue: MemoryQueue, job_id: str, status: JobStatus) -> bool:
    record = await queue.get(job_id)
    return record is not None and record.status is status


class _NoticeLessQueue(MemoryQueue):
    """A MemoryQueue that tells no one of new work (as SQS cannot), whose
    claims wait for ``gate``: a claim can be caught under way."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.gate = asyncio.Event()
        self.gate.set()
        self.claiming = 0

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        return lambda: None

    async def claim(
        self,
        n: int,
        *,
        lease: float,
        kinds: Collection[str] | None = None,
        holder: str | None = None,
    ) -> list[Delivery]:
        self.claiming += 1
        try:
            await self.gate.wait()
            return await super().claim(n, lease=lease, kinds=kinds)
        finally:
            self.claiming -= 1


async def test_jobs_handed_over_during_a_claim_keep_the_concurrency_bound(env: Env) -> None:
    """A claim under way asked for the slots that were free; jobs handed over
    meanwhile took them. What the claim brings beyond the room left goes
    back to the queue, and runs once a slot frees."""
    queue = _NoticeLessQueue(env.clock)
    active = peak = 0
    release = asyncio.Event()

    async def handler(attempt: Attempt) -> None:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await release.wait()
        active -= 1

    worker = env.worker(queue=queue, concurrency=2, poll_interval=0.02)
    worker.register("k", handler)
    await worker.start()
    await until(lambda: worker.ready_for("k"), "its first claim found the queue empty")
    queue.gate.clear()
    for i in range(2):
        await queue.enqueue(b"", kind="k", id=f"queued{i}")  # (no notice: found by a poll)
    await until(lambda: queue.claiming == 1, "a claim is under way")
    assert worker.ready_for("k")
    for i in range(2):
        assert worker.take(await _claimed_here(queue, f"handed{i}"))
    queue.gate.set()
    await until(lambda: queue.claiming == 0, "the claim returned")
    assert worker.in_flight == 2
    for i in range(2):
        await until(lambda i=i: _status_is(queue, f"queued{i}", JobStatus.READY), "it went back")
    release.set()
    await until(lambda: worker.stats.succeeded == 4, "all four ran")
    assert peak == 2 and worker.stats.peak_in_flight == 2


# -- queue outage ----------------------------------------------------------------------


class FlakyQueue(LeaseQueue, IdleHints):
    """Our own test double of an outage: a MemoryQueue whose claim raises
    StoreError while ``down`` is set."""

    def __init__(self, inner: MemoryQueue) -> None:
        self.inner = inner
        self.down = False
        self.failed_claims = 0
        self.failing_acks = 0
        self.claims = 0
        self.next_due_calls = 0
        self.overdeliver = False

    @property
    def clock(self) -> Clock:
        return self.inner.clock

    async def claim(
        self,
        n: int,
        *,
        lease: float,
        kinds: Collection[str] | None = None,
        holder: str | None = None,
    ) -> list[Delivery]:
        self.claims += 1
        if self.down:
            self.failed_claims += 1
            raise StoreError("bucket unreachable")
        return await self.inner.claim(n + self.overdeliver, lease=lease, kinds=kinds)

    async def enqueue_many(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        return await self.inner.enqueue_many(jobs)

    async def renew(self, delivery: Delivery, at_least: float) -> float | None:
        return await self.inner.renew(delivery, at_least)

    async def settle(self, delivery: Delivery, decision: Decision) -> Settlement:
        if isinstance(decision, Ack) and self.failing_acks:
            self.failing_acks -= 1
            raise StoreError("ack timed out")
        return await self.inner.settle(delivery, decision)

    async def cancel(self, id: str) -> bool:
        return await self.inner.cancel(id)

    async def discard_dead(self, id: str) -> bool:
        return await self.inner.discard_dead(id)

    async def get(self, id: str) -> JobRecord | None:
        return await self.inner.get(id)

    async def next_due(self) -> float | None:
        self.next_due_calls += 1
        return await self.inner.next_due()

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        return self.inner.subscribe(listener)

    def next_look(self) -> float | None:
        return self.inner.next_look()


async def test_a_queue_outage_is_survived_and_the_worker_recovers(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    flaky = FlakyQueue(env.queue)
    flaky.down = True
    worker = env.worker(queue=flaky, poll_interval=0.02)
    worker.register("k", lambda attempt: "ok")
    with caplog.at_level(logging.WARNING, logger="stepstone.runtime.worker"):
        await worker.start()
        await env.queue.enqueue(b"", kind="k", id="j")
        await until(lambda: flaky.failed_claims >= 3, "claims kept failing")
        assert worker.stats.succeeded == 0
        assert "bucket unreachable" in caplog.text
    flaky.down = False
    await until(lambda: worker.stats.succeeded == 1, "the job ran after the outage")
    assert worker.stats.queue_errors >= 3


# -- graceful stop ---------------------------------------------------------------------


async def test_stop_releases_stragglers_with_the_attempt_not_counted(env: Env) -> None:
    async def stubborn(attempt: Attempt) -> None:
        await asyncio.Event().wait()

    async def converts(attempt: Attempt) -> None:
        # Turns the cancellation into its own error: still interrupted, not failed.
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("connection closed under me") from None

    await env.queue.enqueue(b"", kind="stubborn", id="a")
    await env.queue.enqueue(b"", kind="converts", id="b")
    worker = env.worker()
    worker.register("stubborn", stubborn)
    worker.register("converts", converts)
    await worker.start()
    await until(lambda: worker.in_flight == 2, "both run")
    await worker.stop(drain_timeout=0.01)
    assert worker.stats.released == 2
    assert worker.stats.retried == worker.stats.dead == 0
    for job_id in ("a", "b"):
        record = await env.record(job_id)
        assert record is not None and record.status is JobStatus.READY
        assert record.attempts == 0, "a drained attempt was counted"
    assert env.reported.calls == []


async def test_stop_waits_for_handlers_that_finish_within_the_drain(env: Env) -> None:
    release = asyncio.Event()

    async def handler(attempt: Attempt) -> str:
        await release.wait()
        return "finished in time"

    await env.queue.enqueue(b"", kind="k", id="j")
    worker = env.worker()
    worker.register("k", handler)
    await worker.start()
    await until(lambda: worker.in_flight == 1, "it runs")
    stopping = asyncio.create_task(worker.stop(drain_timeout=5.0))
    await env.queue.enqueue(b"", kind="k", id="not-claimed")
    release.set()
    await stopping
    assert worker.stats.succeeded == 1 and worker.stats.released == 0
    assert await env.status("not-claimed") is JobStatus.READY


async def test_a_handler_finishing_exactly_at_the_deadline_is_settled_not_released(
    env: Env,
) -> None:
    """The handler's last await resolves, then stop(drain_timeout=0) runs at
    once: the handler completes before the loop looks, but before its job
    task has settled it. It must be settled, not released.

    A long poll interval keeps the loop asleep until stop wakes it, so the
    order is fixed: the handler's wake-up is queued before the loop's.
    """
    release = asyncio.Event()

    async def handler(attempt: Attempt) -> str:
        await release.wait()
        return "just made it"

    await env.queue.enqueue(b"", kind="k", id="j")
    worker = env.worker(poll_interval=60.0)
    worker.register("k", handler)
    await worker.start()
    await until(lambda: worker.in_flight == 1, "it runs")
    release.set()
    await worker.stop(drain_timeout=0)
    assert worker.stats.succeeded == 1 and worker.stats.released == 0
    assert env.reported.of("j") == [Success("just made it")]
    assert await env.record("j") is None


async def test_a_settlement_under_way_at_the_deadline_is_not_cut_short(env: Env) -> None:
    reporting = asyncio.Event()
    report_done = asyncio.Event()

    async def on_terminal(delivery: Delivery, terminal: Terminal) -> None:
        reporting.set()
        await report_done.wait()

    await env.queue.enqueue(b"", kind="k", id="j")
    worker = env.worker(on_terminal=on_terminal)
    worker.register("k", lambda attempt: "done")
    await worker.start()
    await until(reporting.is_set, "on_terminal started")
    stopping = asyncio.create_task(worker.stop(drain_timeout=0.01))
    await until(lambda: worker.stats.released == 0 and not stopping.done(), "stop is waiting")
    await asyncio.sleep(0.05)  # well past the drain deadline
    assert not stopping.done()
    report_done.set()
    await stopping
    assert worker.stats.succeeded == 1 and worker.stats.released == 0


async def test_a_drained_sync_handler_is_released_though_its_thread_runs_on(env: Env) -> None:
    """Python cannot stop a thread: the job goes back anyway, and what the
    thread returns later is ignored."""
    entered, leave = threading.Event(), threading.Event()

    def handler(attempt: Attempt) -> str:
        entered.set()
        leave.wait(5.0)
        return "too late"

    await env.queue.enqueue(b"", kind="k", id="j")
    worker = env.worker()
    worker.register("k", handler)
    await worker.start()
    await until(entered.is_set, "the thread runs")
    try:
        await worker.stop(drain_timeout=0.01)
    finally:
        leave.set()
    assert worker.stats.released == 1 and worker.stats.succeeded == 0
    record = await env.record("j")
    assert record is not None and record.status is JobStatus.READY and record.attempts == 0


async def test_heartbeats_go_on_during_a_drain_longer_than_the_lease(env: Env) -> None:
    release = asyncio.Event()

    async def handler(attempt: Attempt) -> str:
        await release.wait()
        return "finished while draining"

    await env.queue.enqueue(b"", kind="k", id="j")
    worker = env.worker(lease=10.0, heartbeat=0.01)
    worker.register("k", handler)
    await worker.start()
    await until(lambda: worker.in_flight == 1, "it runs")
    stopping = asyncio.create_task(worker.stop(drain_timeout=5.0))
    for _ in range(3):
        env.clock.advance(6.0)

        async def renewed() -> bool:
            record = await env.record("j")
            assert record is not None and record.lease_expires_at is not None
            return record.lease_expires_at == env.clock.now() + 10.0

        await until(renewed, "the lease was renewed during the drain")
    release.set()
    await stopping
    assert worker.stats.succeeded == 1 and worker.stats.lost == 0


async def test_sync_handlers_get_as_many_threads_as_the_concurrency(env: Env) -> None:
    """All eight must be inside at once to pass the barrier; asyncio's default
    executor has only cores + 4 threads (6 on a 2-core machine)."""
    barrier = threading.Barrier(8, timeout=3.0)

    def handler(attempt: Attempt) -> int:
        return barrier.wait()

    for i in range(8):
        await env.queue.enqueue(b"", kind="k", id=f"j{i}")
    worker = env.worker(concurrency=8)
    worker.register("k", handler)
    await worker.start()
    await until(lambda: worker.stats.succeeded == 8, "all eight met at the barrier", within=5.0)


async def test_the_worker_as_a_context_manager_starts_and_drains(env: Env) -> None:
    await env.queue.enqueue(b"", kind="k", id="j")
    worker = env.worker()
    worker.register("k", lambda attempt: "ok")
    async with worker:
        await until(lambda: worker.stats.succeeded == 1, "the job ran")
    assert worker.in_flight == 0


# -- logging ---------------------------------------------------------------------------


async def test_log_records_about_a_job_carry_its_id_kind_and_attempt(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    async def handler(attempt: Attempt) -> None:
        raise Permanent("nope")

    await env.queue.enqueue(b"", kind="k", id="job-77")
    worker = env.worker()
    worker.register("k", handler)
    with caplog.at_level(logging.DEBUG, logger="stepstone.runtime.worker"):
        await worker.start()
        await until(lambda: worker.stats.dead == 1, "the job is dead")
    about_job = [r for r in caplog.records if "job-77" in r.getMessage()]
    assert about_job
    for record in about_job:
        extra: Mapping[str, object] = record.__dict__
        assert (extra["run_id"], extra["kind"], extra["attempt"]) == ("job-77", "k", 1)
        assert f"attempt 1/{DEFAULT_MAX_ATTEMPTS}" in record.getMessage()


# -- configuration ------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"concurrency": 0},
        {"lease": 0.0},
        {"poll_interval": 0.0},
        {"lease": 10.0, "heartbeat": 10.0},
        {"heartbeat": -1.0},
        {"attempt_timeout": 0.0},
        {"cancel_check": 0.0},
    ],
)
def test_settings_that_cannot_work_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Worker(MemoryQueue(), **kwargs)


async def test_registration_mistakes_are_refused_and_lifecycle_misuse_is_harmless() -> None:
    worker = Worker(MemoryQueue())
    worker.register("k", lambda attempt: None)
    with pytest.raises(ValueError, match="already registered"):
        worker.register("k", lambda attempt: None)
    with pytest.raises(ValueError):
        worker.register("other", lambda attempt: None, max_in_flight=0)
    await worker.stop()  # never started: nothing to do
    await worker.start()
    with pytest.raises(RuntimeError):
        await worker.start()
    await worker.stop()
    await worker.stop()  # twice: still fine


async def test_a_settlement_that_raises_is_tried_again(env: Env) -> None:
    flaky = FlakyQueue(env.queue)
    flaky.failing_acks = 2
    worker = env.worker(queue=flaky, poll_interval=0.01)
    worker.register("k", lambda attempt: "ok")
    await worker.start()
    await env.queue.enqueue(b"", kind="k", id="j")
    await until(lambda: worker.stats.succeeded == 1, "the third ack landed")
    assert worker.stats.queue_errors == 2
    assert await env.record("j") is None
    assert len(env.reported.of("j")) == 1, "the result was reported more than once"


async def test_a_lost_settlement_is_logged_and_counted_never_raised(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """The job is cancelled under a running handler (no heartbeat to notice):
    its ack finds the job gone."""
    release = asyncio.Event()

    async def handler(attempt: Attempt) -> str:
        await release.wait()
        return "nobody wants this"

    await env.queue.enqueue(b"", kind="k", id="j")
    worker = env.worker(heartbeat=0, on_terminal=None)
    worker.register("k", handler)
    with caplog.at_level(logging.WARNING, logger="stepstone.runtime.worker"):
        await worker.start()
        await until(lambda: worker.in_flight == 1, "it runs")
        assert await env.queue.cancel("j")
        release.set()
        await until(lambda: worker.in_flight == 0, "it was settled")
    assert worker.stats.lost == 1 and worker.stats.succeeded == 0
    [warning] = [r for r in caplog.records if "no longer ours" in r.getMessage()]
    assert warning.levelno == logging.WARNING and warning.__dict__["run_id"] == "j"
    await env.queue.enqueue(b"", kind="k", id="next")
    await until(lambda: worker.stats.succeeded == 1, "the loop carries on")


async def test_only_registered_leaves_other_kinds_for_other_workers(env: Env) -> None:
    await env.queue.enqueue(b"", kind="theirs", id="theirs")
    await env.queue.enqueue(b"", kind="mine", id="mine")
    worker = env.worker(only_registered=True)
    worker.register("mine", lambda attempt: "ok")
    await worker.start()
    await until(lambda: worker.stats.succeeded == 1, "my job ran")
    record = await env.record("theirs")
    assert record is not None and record.status is JobStatus.READY and record.attempts == 0
    assert worker.stats.dead == 0


async def test_deliveries_beyond_the_claim_are_released_not_run(env: Env) -> None:
    """A queue that breaks the contract must not break the concurrency bound."""
    flaky = FlakyQueue(env.queue)
    flaky.overdeliver = True
    for i in range(3):
        await env.queue.enqueue(b"", kind="k", id=f"j{i}")
    worker = env.worker(queue=flaky, concurrency=1)

    async def forever(attempt: Attempt) -> None:
        await asyncio.Event().wait()

    worker.register("k", forever)
    await worker.start()

    async def one_claimed_two_ready() -> bool:
        counts = await env.queue.counts()
        return counts[JobStatus.RUNNING] == 1 and counts[JobStatus.READY] == 2

    await until(one_claimed_two_ready, "the surplus went back")
    assert worker.in_flight == 1 and worker.stats.peak_in_flight == 1


# -- the observer (what metrics count) ---------------------------------------------------


async def test_the_observer_hears_each_claim_and_how_each_attempt_ended(env: Env) -> None:
    claims: list[str] = []
    reports: list[AttemptReport] = []

    class Observer:
        def claimed(self, delivery: Delivery) -> None:
            claims.append(delivery.id)

        def attempt_over(self, report: AttemptReport) -> None:
            reports.append(report)

    tries = 0

    async def handler(attempt: Attempt) -> str:
        nonlocal tries
        if attempt.run_id == "bad":
            raise Permanent("never")
        tries += 1
        if tries == 1:
            raise ConnectionError("reset")
        return "ok"

    await env.queue.enqueue(b"", kind="k", id="flaky")
    await env.queue.enqueue(b"", kind="k", id="bad")
    worker = env.worker(observer=Observer())
    worker.register("k", handler)
    await worker.start()
    await until(lambda: len(reports) == 3, "three attempts ended")
    assert sorted(claims) == ["bad", "flaky", "flaky"]
    ended = sorted((r.delivery.id, r.delivery.attempt, r.settled, r.error_type) for r in reports)
    assert ended == [
        ("bad", 1, Settlement.DEAD, "stepstone.runtime.errors.Permanent"),
        ("flaky", 1, Settlement.RETRIED, "ConnectionError"),
        ("flaky", 2, Settlement.ACKED, None),
    ]
    results = sorted((r.delivery.id, r.delivery.attempt, r.result) for r in reports)
    assert results == [
        ("bad", 1, AttemptResult.DEAD),
        ("flaky", 1, AttemptResult.FAILED),
        ("flaky", 2, AttemptResult.SUCCEEDED),
    ]
    assert all(r.seconds >= 0 for r in reports)


async def test_an_observer_that_raises_never_changes_how_a_job_settles(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        def claimed(self, delivery: Delivery) -> None:
            raise RuntimeError("broke on the claim")

        def attempt_over(self, report: AttemptReport) -> None:
            raise RuntimeError("broke at the end")

    caplog.set_level(logging.ERROR, logger="stepstone.runtime.worker")
    await env.queue.enqueue(b"", kind="k", id="j")
    worker = env.worker(observer=Broken())
    worker.register("k", lambda attempt: "done")
    await worker.start()
    await until(lambda: worker.stats.succeeded == 1, "the job was acked")
    assert await env.record("j") is None
    assert len(env.reported.calls) == 1
    failures = [r for r in caplog.records if "observer failed" in r.getMessage()]
    assert len(failures) == 2
