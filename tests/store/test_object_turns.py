"""Processes that know nothing of each other sharing one hot object: their
writes spread out so that the object stays busy, the refusals stay few
however many processes there are, and every process is served
(stepstone.store.s3.object_turns); a conditional write that waited
for its turn and would lose does not spend one of the object's writes.

Time is virtual (benchmarks.hot_crowd.VirtualTime): every process sleeps
on one clock that jumps to the next wake once all of them wait, so ten
simulated minutes take a moment."""

from __future__ import annotations

import asyncio
import os
import random
import sys

import pytest

from stepstone.store import MemoryStore, PreconditionFailed, RetryPolicy
from stepstone.store.base import urgent
from stepstone.store.errors import Throttled
from stepstone.store.s3.hot_objects import HOT_AFTER
from stepstone.store.s3.object_turns import INTERVAL, ObjectTurns
from stepstone.store.s3.throttle import AdaptiveRates

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from benchmarks.hot_crowd import VirtualTime, crowd
from benchmarks.s3_like import S3LikeBucket, S3LikeStore


@pytest.mark.parametrize(
    ("processes", "most_refusals", "least_share"),
    [(1, 0.05, 1.0), (3, 0.5, 0.2), (10, 1.5, 0.2), (30, 4.0, 0.1), (100, 8.0, 0.0)],
)
async def test_a_crowd_keeps_a_hot_object_busy_with_few_refusals_and_serves_everyone(
    processes: int, most_refusals: float, least_share: float
) -> None:
    got = await crowd(processes, 600.0)
    assert got.busy >= 0.6  # the object is busy (a process alone is paced below one a second)
    # The refusals an accepted write grow slowly with the crowd, not in step
    # with it, as under a send rate floored at half a write a second.
    assert got.refusals_per_write <= most_refusals
    # No process is starved: the least served gets a share of the mean (at
    # 100 processes, five writes each in ten minutes is too few to tell).
    assert got.least_share >= least_share


async def test_a_hot_writes_turn_waited_for_is_not_spent_on_a_stale_swap() -> None:
    clock = VirtualTime()
    bucket = S3LikeBucket(MemoryStore(), scale=None, object_writes=1.0, clock=clock)
    rates = AdaptiveRates(clock=clock, sleep=clock.sleep)
    ours, theirs = (
        S3LikeStore(
            bucket,
            latency=(0.0, 0.0),
            retry=RetryPolicy(attempts=5, base=0.0, cap=0.0),
            adaptive=adaptive,
        )
        for adaptive in (rates, False)
    )
    etag = await theirs.put("slots/k", b"0")
    turns = ObjectTurns(clock=clock, sleep=clock.sleep, rng=random.Random(0))
    rates.hot.rates["slots/k"] = turns
    turns.record(sent=clock.now, refused=False)  # our next turn is 1.42 s away

    async def swap_after_they_write() -> None:
        await clock.sleep(1.0)  # when the object takes a write again
        await theirs.put_if_match("slots/k", b"theirs", etag)  # while we wait our turn
        with pytest.raises(PreconditionFailed):
            await ours.put_if_match("slots/k", b"ours", etag)

    writes = bucket.counts["write slots"]
    task = asyncio.create_task(swap_after_they_write())
    while not task.done():
        await clock.run_for(0.5)
    await task
    assert bucket.counts["write slots"] == writes + 1  # theirs alone: ours was never sent
    assert bucket.slowdowns["write slots"] == 0
    assert turns.throttles == 0


async def test_a_write_sent_first_keeps_the_objects_pace_not_its_backoff() -> None:
    clock = VirtualTime()
    turns = ObjectTurns(clock=clock, sleep=clock.sleep, rng=random.Random(0))
    for _ in range(3):  # contended: the next write waits up to eight intervals
        turns.record(sent=clock.now, refused=True)
    refused_at = clock.now

    async def renew() -> float:
        with urgent():
            return await turns.acquire()

    task = asyncio.create_task(renew())
    while not task.done():
        await clock.run_for(0.25)
    assert await task == refused_at + INTERVAL  # the object would refuse it sooner


async def _one_processs_record(object_turns: bool) -> tuple[S3LikeBucket, VirtualTime]:
    """A process claims a queue record just created, renews it at once (sent
    first, as a claim that took long is), and acks it: on a bucket that takes
    one write a second per object."""
    clock = VirtualTime()
    bucket = S3LikeBucket(MemoryStore(), scale=None, object_writes=1.0, clock=clock)
    store = S3LikeStore(
        bucket,
        latency=(0.0, 0.0),
        retry=RetryPolicy(attempts=5, base=0.0, cap=0.0),
        adaptive=AdaptiveRates(clock=clock, sleep=clock.sleep, object_turns=object_turns),
    )

    async def life() -> None:
        etag = await store.put_if_absent("queue/jobs/a", b"created")
        etag = await store.put_if_match("queue/jobs/a", b"claimed", etag)
        with urgent():
            etag = await store.put_if_match("queue/jobs/a", b"renewed", etag)
        await store.delete("queue/jobs/a", if_match=etag)

    task = asyncio.create_task(life())
    while not task.done():
        await clock.run_for(0.25)
    await task
    return bucket, clock


async def test_on_a_store_limiting_each_object_every_object_keeps_its_pace() -> None:
    started = VirtualTime().now
    bucket, clock = await _one_processs_record(object_turns=True)
    assert sum(bucket.slowdowns.values()) == 0
    assert bucket.counts["write queue"] == 4
    assert clock.now - started >= 3 * INTERVAL


async def test_untold_its_quick_writes_are_refused_until_it_is_found_hot() -> None:
    try:
        bucket, _ = await _one_processs_record(object_turns=False)
    except Throttled:
        return  # (refused at every try: the worse outcome)
    assert sum(bucket.slowdowns.values()) >= HOT_AFTER


async def _a_crowds_creates(object_turns: bool) -> tuple[S3LikeBucket, int]:
    """Eight writers in one process create fresh keys in one partition for
    30 s, four times as fast as the partition takes writes, on a bucket that
    limits each object too; the bucket, and the creates given up."""
    clock = VirtualTime()
    bucket = S3LikeBucket(MemoryStore(), scale=0.01, object_writes=1.0, clock=clock)  # 35/s
    rates = AdaptiveRates(clock=clock, sleep=clock.sleep, object_turns=object_turns)
    store = S3LikeStore(
        bucket, latency=(0.0, 0.0), retry=RetryPolicy(attempts=5, base=0.0, cap=0.0), adaptive=rates
    )
    given_up = 0

    async def writer(w: int) -> None:
        nonlocal given_up
        n = 0
        while clock.now < started + 30:
            n += 1
            try:
                await store.put_if_absent(f"memos/w{w}/{n}", b"result")
            except Throttled:
                given_up += 1
            await clock.sleep(0.05)  # its work between two step results

    started = clock.now
    writers = asyncio.gather(*(writer(w) for w in range(8)))
    while not writers.done():
        await clock.run_for(1.0)
    await writers
    return bucket, given_up


@pytest.mark.parametrize("object_turns", [False, True])
async def test_a_crowds_creates_refused_by_their_partition_slow_down_told_or_not(
    object_turns: bool,
) -> None:
    bucket, given_up = await _a_crowds_creates(object_turns)
    refused, served = bucket.slowdowns["write memos"], bucket.counts["write memos"]
    assert served >= 0.8 * 35 * 30  # the partition kept busy
    assert refused <= 0.05 * served and given_up == 0  # its rate, not each object's, held back
