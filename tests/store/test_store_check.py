"""The conformance check (``stepstone check-store``) passes on every backend and
catches a store that lacks any one property the engine needs."""

from __future__ import annotations

import os
import sys

import pytest

from stepstone.store import MemoryStore, ObjectStore
from stepstone.store.conformance import (
    OBJECT_LIMIT_REMEDY,
    PROPERTIES,
    SCRATCH,
    CheckSettings,
    check_store,
)
from stepstone.store.doubles.broken import BREAKS, BrokenStore
from stepstone.store.errors import Throttled
from stepstone.store.s3.throttle import AdaptiveRates

SMALL = CheckSettings(increments=24, large_bytes=2 * 1024 * 1024, samples=3, time_limit=60)
"""The command's figures but for the increments (24, not 80): moto applies
conditional writes one at a time, slowly."""

ALSO_FAILS = {
    "read-after-overwrite": {"concurrent-increments"},  # its last read of the counter is stale
}
"""What else a break makes fail, besides the property it breaks."""
TINY = CheckSettings(large_bytes=1024, samples=1, time_limit=60)
"""For a store that takes a write a second per object: a few writes to each."""

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from benchmarks.s3_like import S3LikeBucket, S3LikeStore  # noqa: E402


async def test_every_property_holds_on_every_backend(any_store: ObjectStore) -> None:
    report = await check_store(any_store, SMALL)
    assert [(v.name, v.passed) for v in report.verdicts] == [(p, True) for p in PROPERTIES], [
        v.detail for v in report.verdicts
    ]
    assert report.passed and not report.leftover
    assert {lat.operation for lat in report.latencies} == {
        "get",
        "head",
        "put",
        "put_if_absent",
        "put_if_match",
        "list",
        "delete",
    }
    assert all(0 <= lat.p50 <= lat.p99 for lat in report.latencies)
    assert not report.object_limited and "no limit" in report.one_object
    assert await any_store.list(SCRATCH) == []  # the scratch prefix is gone


@pytest.mark.parametrize("broken", BREAKS)
async def test_each_missing_property_is_caught(broken: str) -> None:
    store = BrokenStore(MemoryStore(), broken, body_limit=1024 * 1024)
    report = await check_store(store, SMALL)
    failed = {v.name for v in report.verdicts if not v.passed}
    assert broken in failed
    assert failed <= {broken} | ALSO_FAILS.get(broken, set())
    assert not report.passed
    verdict = next(v for v in report.verdicts if v.name == broken)
    assert verdict.remedy == PROPERTIES[broken]  # what to do, not only that it failed
    assert await store.list(SCRATCH) == []


async def test_interleaved_writes_are_caught_on_a_real_bucket(s3_store: ObjectStore) -> None:
    """A store that checks a condition and then writes, in two requests, lets
    concurrent creators and incrementers all win: over real HTTP, where the
    requests interleave as they would on a misbehaving provider."""
    for broken in ("create-if-absent", "concurrent-increments"):
        report = await check_store(BrokenStore(s3_store, broken), SMALL, only=[broken])
        failed = {v.name for v in report.verdicts if not v.passed}
        assert failed == {broken}, [v.detail for v in report.verdicts]
    assert await s3_store.list(SCRATCH) == []


async def test_a_property_that_does_not_answer_fails_in_bounded_time() -> None:
    class Stuck(MemoryStore):
        async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
            import asyncio

            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    report = await check_store(Stuck(), CheckSettings(large_bytes=1024, samples=1, time_limit=0.2))
    stuck = {v.name: v.detail for v in report.verdicts if not v.passed}
    assert "compare-and-swap" in stuck and "no answer within 0.2 s" in stuck["compare-and-swap"]
    assert report.unmeasured == "no answer within 0.2 s"


def test_every_property_has_its_break() -> None:
    assert tuple(PROPERTIES) == BREAKS


def _one_write_a_second(*, told: bool) -> S3LikeStore:
    """A client of a bucket taking one write a second per object (GCS),
    told so (``object_turns``) or not."""
    bucket = S3LikeBucket(MemoryStore(), scale=None, object_writes=1.0)
    return S3LikeStore(bucket, latency=(0.001, 0.002), adaptive=AdaptiveRates(object_turns=told))


async def test_a_store_limiting_each_object_is_named_with_what_to_set() -> None:
    report = await check_store(_one_write_a_second(told=False), TINY, only=[])
    assert report.object_limited
    assert "the store limits the writes to one object" in report.one_object
    assert "object_turns=true" in OBJECT_LIMIT_REMEDY


async def test_told_the_store_limits_each_object_the_check_passes_at_its_pace() -> None:
    store = _one_write_a_second(told=True)
    report = await check_store(store, TINY, only=["compare-and-swap"])
    assert report.passed, [v.detail for v in report.verdicts]
    assert not report.object_limited and "paced as object_turns asks" in report.one_object
    assert sum(store.bucket.slowdowns.values()) == 0


class _SwapsRefusedAsTooMany(MemoryStore):
    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        raise Throttled("SlowDown; gave up after 5 attempts")


async def test_a_property_refused_as_too_many_names_the_setting_to_try() -> None:
    report = await check_store(_SwapsRefusedAsTooMany(), TINY, only=["compare-and-swap"])
    [verdict] = report.verdicts
    assert not verdict.passed
    assert "refused writes as too many" in verdict.detail
    assert "object_turns=true" in verdict.detail
