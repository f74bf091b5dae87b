"""A store that allows about one write a second to one object (GCS), on a
fake clock: the object's writes are sent at the rate it takes, one warning
names it, the refusals stay few, nothing fails, and the other keys of its
partition are not held up (stepstone.store.s3.hot_objects); a key
refused as often as its neighbours is not taken for hot.

The bucket is the fleet simulation's (benchmarks/s3_like.py), refusing a
second write within a second to one key with SlowDown."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import sys
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from typing import TypeVar

import pytest

from stepstone.store import MemoryStore, RetryPolicy, Throttled
from stepstone.store.base import urgent
from stepstone.store.s3.hot_objects import HotObjects
from stepstone.store.s3.throttle import AdaptiveRates

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from benchmarks.hot_crowd import VirtualTime
from benchmarks.s3_like import S3LikeBucket, S3LikeStore

T = TypeVar("T")


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


def answer_stream(
    hot: HotObjects, draw: random.Random, *, seconds: float, refusing: Callable[[float], float]
) -> Iterator[float]:
    """A partition's writes, a hundred a second, each refused with the
    chance ``refusing(t)``: yields each time, after the answer, so a test can
    add writes of its own between them."""
    t = 0.0
    n = 0
    while t < seconds:
        n += 1
        t = n / 100
        hot.answered(
            f"memos/r{n}/#1",
            partition="memos writes",
            refused=draw.random() < refusing(t),
            location=f"memos/r{n}/#1",
        )
        yield t


def test_a_key_refused_again_and_again_in_a_congested_partition_is_not_hot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A crowd crosses the partition's limit for a second (half of every
    key's writes refused) amid ten seconds of calm: a key whose four quick
    retries fell in that second is unlucky, not limited alone. Taken for
    hot, it warned of a per-object limit, and its refusals stopped slowing
    the partition."""
    time = FakeTime()
    hot = HotObjects(clock=time)
    draw = random.Random(7)
    congested = lambda t: 0.5 if 5.0 <= t < 6.0 else 0.0  # noqa: E731
    retries = iter([5.2, 5.3, 5.45, 5.7])
    due = next(retries)
    with caplog.at_level(logging.WARNING, logger="stepstone.store"):
        for t in answer_stream(hot, draw, seconds=15, refusing=congested):
            time.now = 1000.0 + t
            if t >= due:
                assert (
                    hot.answered(
                        "memos/unlucky/#1", partition="memos writes", refused=True, location="x"
                    )
                    is None
                )
                due = next(retries, math.inf)
    assert due == math.inf  # all four retries were refused
    assert hot.rates == {}
    assert caplog.records == []


def test_a_key_refused_while_its_neighbours_go_through_is_hot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The same stream calm (one write in two hundred refused), and one key
    retried three times a second, refused but once a second: hot, at its
    fourth refusal, with one warning."""
    time = FakeTime()
    hot = HotObjects(clock=time)
    draw = random.Random(7)
    tries = 0
    with caplog.at_level(logging.WARNING, logger="stepstone.store"):
        for t in answer_stream(hot, draw, seconds=5, refusing=lambda t: 0.005):
            time.now = 1000.0 + t
            if round(t * 100) % 33 == 0 and "slots/k" not in hot.rates:
                tries += 1
                hot.answered(
                    "slots/k", partition="memos writes", refused=tries % 3 != 1, location="slots/k"
                )
    assert list(hot.rates) == ["slots/k"]
    assert tries == 6  # hot at its fourth refusal, two tries accepted among them
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "slots/k" in warnings[0]


async def test_a_key_of_one_process_among_many_in_a_throttled_partition_is_not_hot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One process's share of a crowd's writes to a throttled partition:
    each of its writes refused half the time, retried until written, one
    key after another. Over one key's retries it wrote no other key, so its
    neighbours cannot tell; but they were refused since the partition's
    refusals began, as a throttled partition's are: not hot."""
    time = FakeTime()
    rates = AdaptiveRates(clock=time, sleep=time.sleep)
    draw = random.Random(7)

    async def write(key: str, refused: bool) -> None:
        sending = rates.sending(key)
        sent = await sending.acquire()
        time.now += 0.02
        sending.record(sent=sent, refused=refused)

    with caplog.at_level(logging.WARNING, logger="stepstone.store"):
        for n in range(60):
            while draw.random() < 0.5:
                await write(f"memos/r{n}/#1", refused=True)
            await write(f"memos/r{n}/#1", refused=False)
    assert rates.hot.rates == {}
    assert caplog.records == []
    partition = rates.of("memos/")
    assert partition.rate is not None and partition.throttles > 30


# -- a store that limits every object, not told so -------------------------------------------


def record_lives(
    hot: HotObjects,
    time: FakeTime,
    draw: random.Random,
    *,
    seconds: float,
    refused: Callable[[bool], float],
) -> int:
    """One process's writes to a queue partition, twenty records a second:
    each record claimed (its first write here), then renewed and acked within
    the second (``again``); each write refused with the chance
    ``refused(again)``, retried until accepted. The refusals that fell on
    writes again."""
    t, n, again_refused = 0.0, 0, 0
    while t < seconds:
        n += 1
        for again in (False, True, True):
            while True:
                t += 0.017
                time.now = 1000.0 + t
                refusal = draw.random() < refused(again)
                hot.answered(
                    f"queue/jobs/r{n}", partition="queue writes", refused=refusal, location="x"
                )
                again_refused += refusal and again
                if not refusal:
                    break
    return again_refused


def test_a_store_refusing_the_writes_that_follow_a_processs_own_limits_every_object(
    caplog: pytest.LogCaptureFixture,
) -> None:
    time = FakeTime()
    hot = HotObjects(clock=time)
    with caplog.at_level(logging.WARNING, logger="stepstone.store"):
        record_lives(
            hot, time, random.Random(7), seconds=10, refused=lambda again: 0.9 if again else 0.02
        )
    assert hot.every_object
    told = [r.getMessage() for r in caplog.records if "object_turns=true" in r.getMessage()]
    assert len(told) == 1 and "within the second" in told[0]
    assert hot.rate("queue/jobs/any") is not None  # every object takes turns now


def test_a_throttled_partition_refusing_writes_alike_limits_no_object(
    caplog: pytest.LogCaptureFixture,
) -> None:
    for share in (0.3, 0.5, 0.8):
        time = FakeTime()
        hot = HotObjects(clock=time)
        with caplog.at_level(logging.WARNING, logger="stepstone.store"):
            again_refused = record_lives(
                hot, time, random.Random(7), seconds=60, refused=lambda _, share=share: share
            )
        assert again_refused > 100  # refusals fell on writes again, as on every other
        assert not hot.every_object, share
    assert not [r for r in caplog.records if "object_turns" in r.getMessage()]


async def test_an_untold_process_finds_every_object_limited_and_keeps_each_ones_pace(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A backlog another process created, claimed four at a time by one
    process on a bucket taking one write a second per object: each claim
    renewed at once (sent first, as a claim that took long is) and acked.
    Found out once, and from then on the records' writes wait their turn."""
    clock = VirtualTime()
    bucket = S3LikeBucket(MemoryStore(), scale=None, object_writes=1.0, clock=clock)
    theirs = S3LikeStore(bucket, latency=(0.0, 0.0), adaptive=False)
    rates = AdaptiveRates(clock=clock, sleep=clock.sleep)
    ours = S3LikeStore(
        bucket,
        latency=(0.0, 0.0),
        retry=RetryPolicy(attempts=5, base=0.0, cap=0.0),
        adaptive=rates,
    )
    created = {}
    for n in range(80):
        created[f"queue/jobs/r{n}"] = await theirs.put_if_absent(f"queue/jobs/r{n}", b"0")
    clock.now += 1.0  # the backlog is a second old: its records take a write again
    backlog = iter(created.items())
    refused_when_found: list[int] = []

    async def landed(write: Callable[[], Awaitable[T]]) -> T:
        while True:
            try:
                return await write()
            except Throttled:
                await clock.sleep(0.5)  # (as the engine comes back to it)

    async def lane() -> None:
        for key, etag in backlog:
            etag = await landed(partial(ours.put_if_match, key, b"claimed", etag))
            with urgent():
                etag = await landed(partial(ours.put_if_match, key, b"renewed", etag))
            await landed(partial(ours.delete, key, if_match=etag))
            if rates.hot.every_object and not refused_when_found:
                refused_when_found.append(sum(bucket.slowdowns.values()))

    with caplog.at_level(logging.WARNING, logger="stepstone.store"):
        task = asyncio.gather(*(lane() for _ in range(4)))
        while not task.done():
            await clock.run_for(1.0)
        await task
    assert await ours.list("queue/") == []  # every record acked
    assert rates.hot.every_object
    told = [r for r in caplog.records if "object_turns=true" in r.getMessage()]
    assert len(told) == 1
    assert sum(bucket.slowdowns.values()) - refused_when_found[0] <= 4


@pytest.mark.parametrize("creates", [True, False])
async def test_a_create_refused_again_and_again_is_its_partitions_not_a_hot_object(
    creates: bool,
) -> None:
    """One key's writes refused at every try while its neighbours' go
    through: a limit on that object, unless the writes are creates, which
    an object not there yet cannot be over (a step result's, an outcome's)."""
    time = FakeTime()
    rates = AdaptiveRates(clock=time, sleep=time.sleep)
    for n in range(40):
        neighbour = rates.sending(f"memos/r{n}/#1", creates=True)
        neighbour.record(sent=await neighbour.acquire(), refused=False)
        time.now += 0.05
        if n % 5 == 4:  # every fourth of a second, a try of the one key, refused
            sending = rates.sending("memos/one/#1", creates=creates)
            sending.record(sent=await sending.acquire(), refused=True)
    assert ("memos/one/#1" in rates.hot.rates) is not creates
    assert (rates.of("memos/").throttles > 0) is creates  # a create's refusals slow its partition
