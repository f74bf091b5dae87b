"""Audit records: what an action leaves, how it is read back, what a record
that was tampered with does, and how long records stay.

Records are written to real stores (a directory; a MemoryStore where the
store's modification times must follow a FakeClock, for the sweep)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from wf_support import wait_until

from stepstone import JobRunner
from stepstone.errors import InspectError
from stepstone.ops.actions import Bulk
from stepstone.ops.audited import Said, audited, done, of_bulk
from stepstone.records.audit import Actor, AuditRecord, decode_record, is_record_id, record_id
from stepstone.records.audit_log import AUDIT_RETENTION, AuditLog, sweep
from stepstone.store import MemoryStore
from stepstone.testing import FakeClock

ALICE = Actor("alice", "web", "password", "operator", "203.0.113.7")
OPS = Actor("ops@build-1", "cli", "os")
RUN_A = "a" * 32
RUN_B = "b" * 32
DAY = 86_400.0


def journal_on(path: Path, clock: FakeClock | None = None) -> tuple[JobRunner, AuditLog]:
    runner = JobRunner(str(path), clock=clock)
    return runner, AuditLog(runner.store, runner.layout, runner.clock)


async def test_an_action_is_recorded_before_it_is_done_and_again_with_its_outcome(
    tmp_path: Path,
) -> None:
    runner, journal = journal_on(tmp_path)
    seen_before: list[AuditRecord] = []

    async def act() -> str:
        seen_before.extend((await journal.of_run(RUN_A)).records)
        return "cancelled"

    assert await audited(runner, ALICE, "cancel", [RUN_A], act, done("cancelled it")) == (
        "cancelled"
    )
    [before] = seen_before
    assert (before.outcome, before.ended, before.actor) == ("started", None, ALICE)
    [after] = (await journal.of_run(RUN_A)).records
    assert after.id == before.id and after.outcome == "done" and after.result == "cancelled it"
    assert after.ended is not None and after.ended >= after.at
    assert (after.action, after.runs, after.count) == ("cancel", (RUN_A,), 1)
    # One record in the day's log, a mark under the run; the record is JSON any tool reads.
    day = after.id.partition("T")[0]
    [log_key] = [i.key async for i in runner.store.scan(f"audit/{day}/")]
    assert [i.key async for i in runner.store.scan("audit-runs/")] == [
        f"audit-runs/{RUN_A}/{after.id}"
    ]
    stored = json.loads((await runner.store.get(log_key)).data)
    assert stored["who"] == "alice" and stored["address"] == "203.0.113.7"
    assert stored["outcome"] == "done" and stored["runs"] == [RUN_A]
    await runner.close()


async def test_a_refused_or_failed_action_is_recorded_so_and_its_error_raised(
    tmp_path: Path,
) -> None:
    runner, journal = journal_on(tmp_path)

    async def not_dead() -> None:
        raise InspectError(f"run {RUN_A} is ready, not dead; only a dead run can be retried")

    with pytest.raises(InspectError):
        await audited(runner, OPS, "retry", [RUN_A], not_dead, done("requeued"))

    async def stopped() -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await audited(runner, OPS, "cancel", [RUN_A], stopped, done("cancelled"))
    failed, refused = (await journal.of_run(RUN_A)).records  # newest first
    assert refused.outcome == "refused" and "only a dead run can be retried" in refused.result
    assert failed.outcome == "failed" and failed.result.startswith("stopped: CancelledError")
    await runner.close()


async def test_what_is_no_run_id_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    runner, _ = journal_on(tmp_path)
    acted: list[str] = []

    async def act() -> None:
        acted.append("acted")

    for bad in ("../../etc", "a/b", ""):
        with pytest.raises(InspectError, match="is not a run id"):
            await audited(runner, ALICE, "retry", [RUN_A, bad], act, done("requeued"))
    assert acted == [] and [i async for i in runner.store.scan("")] == []
    await runner.close()


async def test_a_bulk_action_marks_every_run_and_says_which_were_refused(tmp_path: Path) -> None:
    runner, journal = journal_on(tmp_path)
    bulk = Bulk("requeued", [RUN_A], {RUN_B: f"run {RUN_B} is ready, not dead"}, [])

    async def act() -> Bulk:
        return bulk

    await audited(runner, OPS, "retry", [RUN_A, RUN_B], act, of_bulk, detail={"chose": "dead"})
    for run_id in (RUN_A, RUN_B):
        [record] = (await journal.of_run(run_id)).records
        assert record.outcome == "partial" and record.result == "requeued 1 of 2 run(s)"
        assert record.refused == {RUN_B: f"run {RUN_B} is ready, not dead"}
        assert record.detail == {"chose": "dead"} and record.count == 2
    await runner.close()


async def test_the_log_lists_newest_first_since_a_time_and_as_kept(tmp_path: Path) -> None:
    clock = FakeClock(1_780_000_000.0)
    runner, journal = journal_on(tmp_path, clock)
    for actor, run_id in ((OPS, RUN_A), (ALICE, RUN_B), (OPS, RUN_B)):
        await audited(runner, actor, "cancel", [run_id], _nothing, done("ok"))
        clock.advance(DAY)  # a day's folder each
    everything = (await journal.listed()).records
    assert [(r.actor.name, r.runs) for r in everything] == [
        ("ops@build-1", (RUN_B,)),
        ("alice", (RUN_B,)),
        ("ops@build-1", (RUN_A,)),
    ]
    assert everything == sorted(everything, key=lambda r: r.id, reverse=True)
    since = (await journal.listed(since=everything[1].at)).records
    assert since == everything[:2]
    assert (await journal.listed(limit=1)).records == everything[:1]
    alices = await journal.listed(keep=lambda r: r.actor.name == "alice")
    assert alices.records == [everything[1]]
    assert [r.id for r in (await journal.of_run(RUN_B)).records] == [r.id for r in everything[:2]]
    await runner.close()


async def _nothing() -> None:
    return None


async def test_a_record_that_was_tampered_with_is_named_and_the_others_still_read(
    tmp_path: Path,
) -> None:
    runner, journal = journal_on(tmp_path)
    await audited(runner, ALICE, "retry", [RUN_A], _nothing, done("requeued"))
    [good] = (await journal.listed()).records
    key = f"audit/{good.id.partition('T')[0]}/{good.id.partition('T')[2]}"
    fields = json.loads(good.encode())
    for change, named in (
        ({"who": "alice\x1b[2J"}, "who"),
        ({"runs": ["../../etc/passwd"]}, "runs"),
        ({"outcome": "fine"}, "outcome"),
        ({"at": 1e20}, "at"),
        ({"action": "rm -rf"}, "action"),
        ({"count": -1}, "count"),
        ({"v": 2}, "format"),
    ):
        with pytest.raises(ValueError, match=named):
            decode_record(json.dumps(fields | change).encode(), now=runner.clock.now())
    with pytest.raises(ValueError, match="not JSON"):
        decode_record(b"\xff\x00", now=runner.clock.now())

    other = record_id(runner.clock.now())
    await runner.store.put(f"audit/{other.partition('T')[0]}/{other.partition('T')[2]}", b"{}")
    await runner.store.put(key, json.dumps(fields | {"outcome": "fine"}).encode())
    fresh = AuditLog(runner.store, runner.layout, runner.clock)  # nothing kept from before
    found = await fresh.listed()
    assert found.records == []
    assert sorted(bad.key for bad in found.unreadable) == sorted(
        [key, f"audit/{other.partition('T')[0]}/{other.partition('T')[2]}"]
    )
    await runner.close()


def test_record_ids_sort_by_time_and_are_checked() -> None:
    first, second = record_id(1_780_000_000.0), record_id(1_780_000_000.000001)
    assert first < second and is_record_id(first) and is_record_id(second)
    for bad in ("", "2026-01-31", "../2026-01-31T120000.000000-1a2b3c4d", first[:-1] + "g"):
        assert not is_record_id(bad)


async def test_records_are_swept_after_their_window_and_kept_without_one() -> None:
    clock = FakeClock(1_780_000_000.0)
    store = MemoryStore(clock=clock.now)
    runner = JobRunner(store, clock=clock)
    await audited(runner, OPS, "cancel", [RUN_A], _nothing, done("ok"))
    clock.advance(20 * DAY)
    await audited(runner, OPS, "cancel", [RUN_B], _nothing, done("ok"))
    clock.advance(71 * DAY)  # the first is 91 days old, the second 71
    removed = await sweep(store, runner.layout, clock.now() - AUDIT_RETENTION)
    assert removed == 2  # the first's record and its mark
    journal = AuditLog(store, runner.layout, clock)
    assert [r.runs for r in (await journal.listed()).records] == [(RUN_B,)]
    assert (await journal.of_run(RUN_A)).records == []


async def test_a_worker_with_retention_sweeps_the_audit_after_its_own_window() -> None:
    """``JobRunner(retention=..., audit_retention=...)``: finished runs after
    one window, audit records after the other; None keeps them."""
    clock = FakeClock(1_780_000_000.0)
    store = MemoryStore(clock=clock.now)
    keeper = JobRunner(store, clock=clock, retention=DAY, audit_retention=None)
    sweeper = JobRunner(store, clock=clock, retention=DAY, audit_retention=30 * DAY)
    await audited(keeper, OPS, "cancel", [RUN_A], _nothing, done("ok"))
    journal = AuditLog(store, keeper.layout, clock)

    async def swept_past(run_id: str) -> None:
        """An old outcome put for ``run_id``, seen swept: the sweeper went round once."""
        await store.put(keeper.layout.outcome(run_id), b"an outcome")
        clock.advance(2 * DAY)

        async def tombstoned() -> bool:
            return (await store.get(keeper.layout.outcome(run_id))).data != b"an outcome"

        await wait_until(tombstoned, timeout=10.0)

    async with keeper:
        clock.advance(31 * DAY)
        await swept_past(RUN_A)
        await swept_past(RUN_B)  # (a round begun after the first one ended)
    assert len((await journal.listed()).records) == 1  # kept: no window
    async with sweeper:
        clock.advance(1.0)

        async def audit_swept() -> bool:
            return not [i async for i in store.scan("audit")]

        await wait_until(audit_swept, timeout=10.0)
    with pytest.raises(ValueError, match="audit_retention"):
        JobRunner(store, retention=DAY, audit_retention=0)


def test_said_of_a_bulk_action_done_in_full_or_not_at_all() -> None:
    assert of_bulk(Bulk("cancelled", [RUN_A, RUN_B], {}, [])) == Said(
        "done", "cancelled 2 of 2 run(s)"
    )
    none = of_bulk(Bulk("cancelled", [], {RUN_A: "finished"}, []))
    assert none.outcome == "refused"
