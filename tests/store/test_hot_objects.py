"""A store that allows about one write a second to one object (GCS), on a
fake clock: the object's writes are sent at the rate it takes, one warning
names it, the refusals stay few, nothing fails, and the other keys of its
partition are not held up (stepstone.store.wrappers.hot_objects).

The bucket is the fleet simulation's (benchmarks/s3_like.py), refusing a
second write within a second to one key with SlowDown."""

from __future__ import annotations

import logging
import os
import sys

import pytest

from stepstone.store import MemoryStore, RetryPolicy
from stepstone.store.wrappers.throttle import AdaptiveRates

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from benchmarks.s3_like import S3LikeBucket, S3LikeStore


class FakeTime:
    """A clock that moves only when a waiter sleeps (the sleep returns at
    once, the clock moved on by it)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


async def test_a_hot_object_is_written_at_the_rate_it_takes_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    time = FakeTime()
    bucket = S3LikeBucket(MemoryStore(), scale=None, object_writes=1.0, clock=time)
    store = S3LikeStore(
        bucket,
        latency=(0.0, 0.0),
        retry=RetryPolicy(attempts=5, base=0.0, cap=0.0),
        adaptive=AdaptiveRates(clock=time, sleep=time.sleep),
    )
    start = time.now
    with caplog.at_level(logging.WARNING, logger="stepstone.store"):
        for n in range(30):  # one process's updates of a slot object, one after another
            await store.put("slots/k", b"%d" % n)
        hot = time.now
        for n in range(5):  # other keys of the partition
            await store.put(f"slots/other-{n}", b"x")
    assert (await store.get("slots/k")).data == b"29"  # every write landed, none failed
    assert time.now - start >= 20  # at about the one a second the object takes
    assert time.now - hot < 1  # the rest of the partition is not held to it
    assert bucket.slowdowns["write slots"] <= 12  # a few refusals, not a storm
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "slots/k" in warnings[0] and "per object" in warnings[0]


async def test_refusals_spread_over_a_partition_make_no_object_hot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    time = FakeTime()
    rates = AdaptiveRates(clock=time, sleep=time.sleep)
    with caplog.at_level(logging.WARNING, logger="stepstone.store"):
        for n in range(40):  # a crowded partition: each key refused once
            sending = rates.sending(f"memos/r{n}/#1")
            sent = await sending.acquire()
            time.now += 0.05
            sending.record(sent=sent, refused=True)
    assert rates.hot.rates == {}
    assert caplog.records == []
    assert rates.of("memos/").rate is not None  # the partition's rate was lowered instead
