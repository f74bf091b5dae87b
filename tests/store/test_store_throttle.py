"""AdaptiveRate on a fake clock: no waits until throttled, no cut for a lone
refusal, one cut per congestion event, requests spaced at the allowed rate,
a floor, recovery on successes; AdaptiveRates, one rate per partition."""

from __future__ import annotations

import asyncio

import pytest

from stepstone.store.wrappers.throttle import CUT_AFTER, MIN_RATE, NAP, AdaptiveRate, AdaptiveRates


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
        rate.record(sent=time.now - 0.04, refused=0)


def limited(time: FakeTime) -> AdaptiveRate:
    return AdaptiveRate(clock=time, sleep=time.sleep)


async def test_never_throttled_never_waits() -> None:
    time = FakeTime()
    rate = limited(time)
    for _ in range(3000):
        sent = await rate.acquire()
        assert sent == time.now
        time.now += 0.001
        rate.record(sent=sent, refused=0)
    assert rate.rate is None
    assert time.slept == []
    assert rate.measured == pytest.approx(1000, rel=0.05)  # (clocked all the same)


async def test_a_throttle_cuts_the_rate_and_spaces_requests() -> None:
    time = FakeTime()
    rate = limited(time)
    answers(rate, time, per_second=100, seconds=3)
    rate.record(sent=time.now - 0.04, refused=CUT_AFTER)
    assert rate.rate == pytest.approx(0.7 * 100, rel=0.05)

    # The bucket starts empty: ten requests at once leave 1/rate apart.
    start = time.now
    sent = await asyncio.gather(*(rate.acquire() for _ in range(10)))
    step = 1.0 / rate.rate
    assert sent == pytest.approx([start + step * (n + 1) for n in range(10)])


async def test_a_lone_refusal_does_not_cut() -> None:
    time = FakeTime()
    rate = limited(time)
    answers(rate, time, per_second=100, seconds=3)
    for refused in range(1, CUT_AFTER):  # refused, and refused again on retry...
        rate.record(sent=time.now - 0.04, refused=refused)
    rate.record(sent=time.now - 0.04, refused=0)  # ...and then it got through
    assert (rate.rate, rate.throttles, rate.cuts) == (None, CUT_AFTER - 1, 0)
    await rate.acquire()
    assert time.slept == []


async def test_one_cut_per_congestion_event() -> None:
    time = FakeTime()
    rate = limited(time)
    answers(rate, time, per_second=100, seconds=3)
    in_flight = time.now - 0.04
    for _ in range(50):  # fifty requests sent together, refused together
        rate.record(sent=in_flight, refused=CUT_AFTER)
    assert rate.rate == pytest.approx(0.7 * 100, rel=0.05)
    assert (rate.throttles, rate.cuts) == (50, 1)

    sent = await rate.acquire()  # sent at the new rate, and refused: a new event
    time.now += 0.04
    rate.record(sent=sent, refused=CUT_AFTER)
    assert rate.rate == pytest.approx(0.7 * 0.7 * 100, rel=0.05)
    assert rate.cuts == 2


async def test_throttles_without_end_reach_the_floor_not_zero() -> None:
    time = FakeTime()
    rate = limited(time)
    answers(rate, time, per_second=50, seconds=2)
    for _ in range(40):
        sent = await rate.acquire()
        time.now += 0.01
        rate.record(sent=sent, refused=CUT_AFTER)
    assert rate.rate == MIN_RATE
    time.slept.clear()
    start = time.now
    await asyncio.gather(*(rate.acquire() for _ in range(3)))
    assert time.now - start == pytest.approx(3 / MIN_RATE, abs=0.05)
    # A waiter far back in the queue looks at the rate again every NAP
    # seconds, so a rate that grows meanwhile lets it go sooner.
    assert max(time.slept) == pytest.approx(NAP)


async def test_successes_grow_the_rate_back_past_where_it_was_cut() -> None:
    time = FakeTime()
    rate = limited(time)
    answers(rate, time, per_second=200, seconds=3)
    rate.record(sent=time.now - 0.04, refused=CUT_AFTER)
    cut = rate.rate
    assert cut is not None and cut < 200

    seen = [cut]
    for _ in range(30):  # thirty seconds at whatever rate is allowed
        allowed = rate.rate
        assert allowed is not None
        answers(rate, time, per_second=allowed, seconds=1)
        seen.append(rate.rate)
    assert seen == sorted(seen)  # never cut again without a throttle
    assert seen[-1] > 200  # CUBIC probes past the rate that was throttled
    assert rate.cuts == 1

    # Once it was throttled, the bucket stays: requests sent no faster than
    # it refills wait for nothing.
    time.slept.clear()
    for _ in range(100):
        time.now += 1.0 / 200
        await rate.acquire()
    assert time.slept == []


def test_one_rate_per_partition_the_first_key_segment() -> None:
    time = FakeTime()
    rates = AdaptiveRates(clock=time, sleep=time.sleep)
    assert rates.of("memos/r1/a") is rates.of("memos/r2/b")
    assert rates.of("queue/1") is rates.of("queue/") is not rates.of("memos/r1/a")
    answers(rates.of("queue/1"), time, per_second=100, seconds=3)
    rates.of("queue/1").record(sent=time.now - 0.04, refused=CUT_AFTER)
    assert rates.of("queue/2").rate is not None
    assert rates.of("memos/r1/a").rate is None  # another partition sends as before
