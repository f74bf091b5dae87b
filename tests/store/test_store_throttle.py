"""The send rates a process keeps per partition, on a fake clock.

AdaptiveRate alone: no waits until throttled, the first rate at what the
partition let through, one congestion event cutting at most to DEEP_CUT,
requests spaced at the allowed rate, a floor, recovery on successes. Then a
fleet: processes, each with rates of its own, against one partition that
serves so many requests a second and answers the rest SlowDown: requests
shed, nothing fails, the sum held near the limit with few SlowDowns
whatever the number of processes, and the rate recovers when the partition
does. AdaptiveRates: one rate per partition and class, one set a process.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

import pytest

from stepstone.store.base import urgent
from stepstone.store.s3.send_rate import (
    DEEP_CUT,
    MIN_RATE,
    NAP,
    SETTLE,
    AdaptiveRate,
)
from stepstone.store.s3.throttle import AdaptiveRates, process_rates


class FakeTime:
    """A clock that moves only when told to, or when a waiter sleeps (a
    sleep returns at once, the clock moved on by it)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def answers(rate: AdaptiveRate, time: FakeTime, per_second: float, seconds: float) -> None:
    """``per_second`` successful answers a second for ``seconds``."""
    for _ in range(round(per_second * seconds)):
        time.now += 1.0 / per_second
        rate.record(sent=time.now - 0.04, refused=False)


def limited(time: FakeTime) -> AdaptiveRate:
    return AdaptiveRate(clock=time, sleep=time.sleep)


async def at_its_floor(time: FakeTime) -> AdaptiveRate:
    """A rate throttled down to MIN_RATE, every try refused."""
    rate = limited(time)
    answers(rate, time, per_second=50, seconds=2)
    for _ in range(20):
        sent = await rate.acquire()
        time.now += SETTLE
        rate.record(sent=sent, refused=True)
    return rate


async def test_never_throttled_never_waits() -> None:
    time = FakeTime()
    rate = limited(time)
    for _ in range(3000):
        sent = await rate.acquire()
        assert sent == time.now
        time.now += 0.001
        rate.record(sent=sent, refused=False)
    assert rate.rate is None
    assert time.slept == []
    assert rate.measured == pytest.approx(1000, rel=0.05)  # (measured all the same)


async def test_a_throttle_sets_the_rate_the_partition_let_through_and_spaces_requests() -> None:
    time = FakeTime()
    rate = limited(time)
    answers(rate, time, per_second=100, seconds=3)
    rate.record(sent=time.now - 0.04, refused=True)
    assert rate.rate == pytest.approx(100, rel=0.1)

    # The bucket starts empty: ten requests at once leave 1/rate apart.
    start = time.now
    sent = await asyncio.gather(*(rate.acquire() for _ in range(10)))
    step = 1.0 / rate.rate
    assert sent == pytest.approx([start + step * (n + 1) for n in range(10)], rel=1e-3)


async def test_a_rate_told_up_front_spaces_requests_from_the_first() -> None:
    time = FakeTime()
    rate = AdaptiveRate(rate=20.0, clock=time, sleep=time.sleep)
    start = time.now
    sent = await asyncio.gather(*(rate.acquire() for _ in range(5)))
    assert sent == pytest.approx([start + (n + 1) / 20.0 for n in range(5)], rel=1e-3)
    rate.record(sent=time.now - 0.04, refused=True)  # its first refusal: an event of its own
    assert (rate.throttles, rate.events) == (1, 1)
    assert rate.rate is not None and rate.rate < 20.0


async def test_one_congestion_event_cuts_at_most_to_deep_cut() -> None:
    time = FakeTime()
    rate = limited(time)
    answers(rate, time, per_second=100, seconds=3)
    rate.record(sent=time.now - 0.04, refused=True)  # the first: the rate is set
    answers(rate, time, per_second=100, seconds=1)
    before = rate.rate
    assert before is not None
    in_flight = time.now - 0.01
    time.now += 0.02
    for _ in range(50):  # fifty requests sent together, refused together
        rate.record(sent=in_flight, refused=True)
    assert rate.rate == pytest.approx(DEEP_CUT * before, rel=0.01)
    assert (rate.throttles, rate.events) == (51, 1)

    time.now += SETTLE
    sent = await rate.acquire()  # sent at the new rate, and refused: a new event
    time.now += 0.04
    rate.record(sent=sent, refused=True)
    assert rate.events == 2
    assert rate.rate < DEEP_CUT * before


async def test_throttles_without_end_reach_the_floor_not_zero() -> None:
    time = FakeTime()
    rate = limited(time)
    answers(rate, time, per_second=50, seconds=2)
    for _ in range(40):  # every try refused, each its own congestion event
        sent = await rate.acquire()
        time.now += SETTLE
        rate.record(sent=sent, refused=True)
    assert rate.rate == MIN_RATE
    time.slept.clear()
    start = time.now
    await asyncio.gather(*(rate.acquire() for _ in range(3)))
    assert time.now - start >= 2.5 / MIN_RATE  # (the bucket may hold one)
    # A waiter far back in the queue looks at the rate again every NAP
    # seconds, so a rate that grows meanwhile lets it go sooner.
    assert max(time.slept) == pytest.approx(NAP)


async def test_a_request_sent_first_does_not_queue_behind_the_others() -> None:
    time = FakeTime()
    rate = await at_its_floor(time)
    start = time.now
    with urgent():  # a lease's renewal
        assert await rate.acquire() == start
    assert time.now == start
    await rate.acquire()  # the others still wait their turn
    assert time.now > start


async def test_a_waiter_whose_partition_is_forgotten_while_it_waits_goes_at_once() -> None:
    # The refusals that set the rate turn out to be one hot object's
    # (stepstone.store.s3.hot_objects), and the partition goes back to
    # unthrottled while requests wait far back in its queue: they go then.
    time = FakeTime()
    rate = await at_its_floor(time)

    async def sleep(seconds: float) -> None:
        await time.sleep(seconds)
        if seconds == NAP and rate.rate is not None:
            rate.forget()  # (while a waiter naps)

    rate._sleep = sleep
    time.slept.clear()
    start = time.now
    sent = await asyncio.gather(*(rate.acquire() for _ in range(10)))
    assert rate.rate is None
    assert max(sent) == pytest.approx(start + NAP)  # each went as it woke from its first nap


async def test_successes_grow_the_rate_back_past_where_it_was_cut() -> None:
    time = FakeTime()
    rate = limited(time)
    answers(rate, time, per_second=200, seconds=3)
    rate.record(sent=time.now - 0.04, refused=True)
    answers(rate, time, per_second=200, seconds=1)
    in_flight = time.now - 0.01
    time.now += 0.05
    for _ in range(100):  # a burst refused: one event, cut to its floor
        rate.record(sent=in_flight, refused=True)
    cut = rate.rate
    assert cut is not None and cut < 200

    seen = [cut]
    for _ in range(90):  # a minute and a half at whatever rate is allowed
        allowed = rate.rate
        assert allowed is not None
        answers(rate, time, per_second=allowed, seconds=1)
        seen.append(rate.rate)
    assert seen == sorted(seen)  # never cut again without a throttle
    assert seen[-1] > 200  # it probes past the rate it was cut from

    # Once it was throttled, the bucket stays: requests sent no faster than
    # it refills wait for nothing.
    time.slept.clear()
    for _ in range(100):
        time.now += 1.0 / 200
        await rate.acquire()
    assert time.slept == []


def test_one_rate_per_partition_and_class_the_first_key_segment() -> None:
    time = FakeTime()
    rates = AdaptiveRates(clock=time, sleep=time.sleep)
    assert rates.of("memos/r1/a") is rates.of("memos/r2/b")
    assert rates.of("queue/1") is rates.of("queue/") is not rates.of("memos/r1/a")
    assert rates.of("queue/1", reads=True) is not rates.of("queue/1")
    assert rates.of("queue/1", under="app") is not rates.of("queue/1")
    answers(rates.of("queue/1"), time, per_second=100, seconds=3)
    rates.of("queue/1").record(sent=time.now - 0.04, refused=True)
    assert rates.of("queue/2").rate is not None
    assert rates.of("memos/r1/a").rate is None  # another partition sends as before
    assert rates.of("queue/2", reads=True).rate is None  # and so do its reads


def test_every_store_of_a_process_on_one_bucket_shares_its_rates() -> None:
    assert process_rates("|bucket-a") is process_rates("|bucket-a")
    assert process_rates("|bucket-a") is not process_rates("|bucket-b")
    assert process_rates("|bucket-a") is not process_rates("http://minio:9000|bucket-a")


# -- a fleet of processes, each with rates of its own ---------------------------------------


@dataclass
class Partition:
    """A partition that serves ``limit`` requests a second (a token bucket
    holding a tenth of a second's worth, as benchmarks/s3_like.py) and
    answers the rest SlowDown."""

    limit: float
    now: float = 0.0
    tokens: float = 0.0
    served: int = 0
    refused: int = 0

    def answer(self, now: float) -> bool:
        self.tokens = min(self.limit / 10, self.tokens + (now - self.now) * self.limit)
        self.now = now
        if self.tokens >= 1:
            self.tokens -= 1
            self.served += 1
            return True
        self.refused += 1
        return False


@dataclass
class Process:
    """A process that always has more to send than it may: each tick it
    sends what its rate allows (or ``eager`` a second before any throttle),
    each request answered 40 ms later and, if refused, sent again in its
    turn."""

    rate: AdaptiveRate
    eager: float
    credit: float = 0.0
    in_flight: list[float] = field(default_factory=list)
    retries: int = 0
    """Refused requests not yet sent again."""


def run_fleet(
    processes: int,
    partition: Partition,
    time: FakeTime,
    seconds: float,
    *,
    fleet: list[Process] | None = None,
) -> list[Process]:
    """Drive ``processes`` (or ``fleet``) against ``partition`` for ``seconds``
    of the fake clock, in 5 ms ticks; deterministic (seeded jitter)."""
    rng = random.Random(processes)
    if fleet is None:
        eager = 4 * partition.limit / processes  # together, four times the limit
        fleet = [Process(limited(time), eager) for _ in range(processes)]
    end = time.now + seconds
    while time.now < end:
        time.now += 0.005
        partition_now = time.now
        for process in rng.sample(fleet, len(fleet)):  # the bucket favours nobody
            allowed = process.rate.rate if process.rate.rate is not None else process.eager
            process.credit = min(process.credit + allowed * 0.005 * rng.uniform(0.5, 1.5), 4.0)
            while process.credit >= 1:  # a retry waits for its turn as a new request does
                process.credit -= 1
                process.retries = max(0, process.retries - 1)
                process.in_flight.append(time.now)
            due = [sent for sent in process.in_flight if sent <= time.now - 0.04]
            process.in_flight = [sent for sent in process.in_flight if sent > time.now - 0.04]
            for sent in due:
                refused = not partition.answer(partition_now)
                process.rate.record(sent=sent, refused=refused)
                if refused:
                    process.retries += 1  # tried again, before anything new
    return fleet


@pytest.mark.parametrize("processes", [1, 10, 100])
def test_a_fleet_each_on_its_own_holds_a_partition_near_its_limit_with_few_slowdowns(
    processes: int,
) -> None:
    time = FakeTime()
    partition = Partition(limit=350.0, now=time.now)
    fleet = run_fleet(processes, partition, time, seconds=30)  # the crowd finds the limit
    partition.served = partition.refused = 0
    run_fleet(processes, partition, time, seconds=60, fleet=fleet)
    assert partition.served >= 0.85 * 350 * 60  # the partition kept busy
    assert partition.refused <= 0.02 * partition.served  # and asked rarely to slow down
    assert all(p.rate.rate is not None for p in fleet)  # each process learnt to send less


def test_the_rate_recovers_when_the_partition_does() -> None:
    time = FakeTime()
    partition = Partition(limit=350.0, now=time.now)
    fleet = run_fleet(10, partition, time, seconds=30)
    partition.limit = 100.0  # the partition serves less for a while: the fleet sheds
    run_fleet(10, partition, time, seconds=20, fleet=fleet)
    assert sum(p.rate.rate or 0 for p in fleet) < 200
    partition.limit = 350.0  # and then as before
    run_fleet(10, partition, time, seconds=60, fleet=fleet)
    partition.served = partition.refused = 0
    run_fleet(10, partition, time, seconds=20, fleet=fleet)
    assert partition.served >= 0.85 * 350 * 20
