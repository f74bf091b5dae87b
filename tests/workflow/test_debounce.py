"""Debounce: the submits of one key within ``wait`` of each other make one
run, started ``wait`` after the last (within ``max_wait`` of the first),
with the last one's input; every handle answers with its outcome.

The rules on their own against a model (debounce_model.py), with random
timings; a runner on a fake clock, where time is the subject; the same
checked against the model on every store with a real clock and racing
submitters. Across processes: test_debounce_multiprocess.py."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

import pytest
from debounce_jobs import Failing, Noted, Reindex
from debounce_model import Ran, Submit, check, model
from hypothesis import given, settings
from hypothesis import strategies as st

from stepstone import (
    Debounce,
    DebounceBacklog,
    Job,
    JobContext,
    JobRunner,
    JobStatus,
    SubmitOptions,
)
from stepstone.limits.shared import SharedObject
from stepstone.records import debounce_windows as rules
from stepstone.records.layout import Layout, limit_digest
from stepstone.runtime.store_queue.records import CorruptRecord
from stepstone.store import MemoryStore, ObjectStore
from stepstone.testing import FakeClock, advance, wait_until

WAIT, MAX_WAIT = 1.0, 2.5


def debounced(key: str = "doc-1", wait: float = WAIT, max_wait: float | None = MAX_WAIT) -> Any:
    return SubmitOptions(debounce=Debounce(key, wait=wait, max_wait=max_wait))


# -- the rules alone ---------------------------------------------------------------


def joined_by_rules(
    times: list[float], wait: float, max_wait: float | None
) -> list[tuple[list[int], float]]:
    state: rules.Windows | None = None
    windows: dict[str, tuple[list[int], float]] = {}
    for index, at in enumerate(times):
        state, joined = rules.join(
            state,
            job="j",
            key="k",
            run=f"run{index:04d}",
            data=b"%d" % index,
            wait=wait,
            max_wait=max_wait,
            now=at,
        )
        members, _ = windows.get(joined.run, ([], 0.0))
        windows[joined.run] = ([*members, index], joined.due)
        assert joined.count == len(members) + 1
    return list(windows.values())


@settings(max_examples=300, deadline=None)
@given(
    gaps=st.lists(st.floats(0, 3), min_size=1, max_size=40),
    wait=st.floats(0.1, 2),
    max_wait=st.one_of(st.none(), st.floats(0.1, 5)),
)
def test_the_rules_make_the_windows_the_model_makes(
    gaps: list[float], wait: float, max_wait: float | None
) -> None:
    times = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    assert joined_by_rules(times, wait, max_wait) == model(times, wait, max_wait)


def test_a_run_waits_for_its_window_then_takes_the_last_input_once() -> None:
    state, first = rules.join(
        None, job="j", key="k", run="r1", data=b"a", wait=1, max_wait=None, now=0
    )
    state, second = rules.join(
        state, job="j", key="k", run="r2", data=b"b", wait=1, max_wait=None, now=0.5
    )
    assert (first.run, second.run, second.due) == ("r1", "r1", 1.5)
    state, early = rules.take(state, run="r1", now=1.2)
    assert early.until == 1.5 and early.input is None
    state, taken = rules.take(state, run="r1", now=1.5)
    assert taken.input == b"b"
    # Closed: a submit now opens a new window, and a second take (a claim
    # that died before recording the input) finds the same input.
    state, third = rules.join(
        state, job="j", key="k", run="r3", data=b"c", wait=1, max_wait=None, now=1.5
    )
    assert third.opened and third.run == "r3"
    state, again = rules.take(state, run="r1", now=9)
    assert again.input == b"b"
    state, _ = rules.drop(state, run="r1")
    assert state is not None and [w.run for w in state.windows] == ["r3"]
    _, gone = rules.take(state, run="r1", now=9)
    assert not gone.found


def test_a_window_never_enqueued_is_dropped_and_a_backlog_is_refused() -> None:
    state, _ = rules.join(None, job="j", key="k", run="r0", data=b"", wait=1, max_wait=None, now=0)
    later = rules.ABANDONED + 2
    state, joined = rules.join(
        state, job="j", key="k", run="r1", data=b"", wait=1, max_wait=None, now=later
    )
    assert joined.opened and [w.run for w in state.windows] == ["r1"]
    for n in range(2, rules.MAX_WINDOWS + 1):  # enqueued, past due, never taken
        state, _ = rules.enqueued(state, run=f"r{n - 1}")
        state, joined = rules.join(
            state, job="j", key="k", run=f"r{n}", data=b"", wait=1, max_wait=None, now=later + n
        )
        assert joined.opened
    state, _ = rules.enqueued(state, run=f"r{rules.MAX_WINDOWS}")
    _, refused = rules.join(
        state, job="j", key="k", run="rx", data=b"", wait=1, max_wait=None, now=later + 999
    )
    assert refused.refused


@pytest.mark.parametrize(
    "fields",
    [
        {"job": "j", "key": "k"},
        {"job": "j", "key": "k", "windows": [["r", 0, 0, float("nan"), None, 1, b"", 0, 0]]},
        {"job": "j", "key": "k", "windows": [["r", 0, 0, 1, None, 1, "text", 0, 0]]},
        {"job": "j", "key": "k", "windows": [["r", 0, 0, 1, None, -1, b"", 0, 0]]},
    ],
)
def test_a_stored_object_that_is_not_windows_is_named(fields: Any) -> None:
    with pytest.raises(CorruptRecord, match="debounce/x"):
        rules.from_fields(fields, "debounce/x")


def test_a_debounce_is_checked_before_anything_is_written() -> None:
    with pytest.raises(ValueError, match="wait"):
        Debounce("k", wait=0)
    with pytest.raises(ValueError, match="max_wait"):
        Debounce("k", wait=1, max_wait=float("inf"))
    with pytest.raises(ValueError, match="key"):
        Debounce("", wait=1)


class Keyed(Job[str]):
    NAME = "debounce-keyed"
    n: int

    def idempotency_key(self) -> str:
        return f"k{self.n}"

    async def run(self, ctx: JobContext) -> str:
        return ""


async def test_a_submit_that_cannot_be_debounced_is_refused_saying_why() -> None:
    store = MemoryStore()
    runner = JobRunner(store, jobs=[Keyed, Reindex])
    with pytest.raises(ValueError, match="idempotency key"):
        await runner.submit(Keyed(n=1), debounced())
    with pytest.raises(ValueError, match="run_at"):
        from datetime import UTC, datetime

        await runner.submit(
            Reindex(n=1),
            SubmitOptions(run_at=datetime.now(UTC), debounce=Debounce("k", wait=1)),
        )
    assert [info async for info in store.scan("")] == []
    await runner.close()


# -- a runner on a fake clock --------------------------------------------------------


@pytest.fixture
def make_debounced(make_runner: Callable[..., JobRunner], noted: Noted) -> Callable[..., JobRunner]:
    def make(**kwargs: Any) -> JobRunner:
        kwargs.setdefault("jobs", [Reindex, Failing])
        kwargs.setdefault("state", [noted])
        return make_runner(**kwargs)

    return make


@pytest.fixture
def noted() -> Noted:
    return Noted()


async def test_submits_within_wait_make_one_run_of_the_last_input(
    make_debounced: Callable[..., JobRunner], clock: FakeClock, noted: Noted
) -> None:
    async with make_debounced() as runner:
        start = clock.now()
        handles = []
        for n in range(4):  # at 0, 0.6, 1.2, 1.8: each within WAIT of the last
            handles.append(await runner.submit(Reindex(n=n), debounced()))
            await advance(clock, 0.6)
        assert len({h.id for h in handles}) == 1
        assert [h.debounced and h.debounced.count for h in handles] == [1, 2, 3, 4]
        run = handles[0].id
        # Claimed at its first due time (1.0), it found its window moved on.
        await wait_until(lambda: status_is(runner, run, JobStatus.DEBOUNCED))
        state = await runner.status(run)
        assert state is not None and state.waiting_for is not None
        assert "(4 submits)" in state.waiting_for and "until" in state.waiting_for
        assert noted.ran == []
        # Due 2.5 (capped by max_wait from the first, not 1.8 + 1.0 = 2.8).
        await advance(clock, 2.5 - (clock.now() - start) - 0.01)
        await asyncio.sleep(0.05)
        assert noted.ran == []
        await advance(clock, 0.02)
        results = [await h.result(timeout=10) for h in handles]
        assert results == ["ran 3"] * 4
        assert [(r, n) for r, n, _ in noted.ran] == [(run, 3)]
        # After the run started, a submit makes a new run.
        after = await runner.submit(Reindex(n=9), debounced())
        assert after.id != run and after.newly_submitted
        await advance(clock, WAIT)
        assert await after.result(timeout=10) == "ran 9"
        outcome = await runner.outcome(run, str)
        assert outcome is not None and outcome.ok


async def status_is(runner: JobRunner, run: str, status: JobStatus) -> bool:
    state = await runner.status(run)
    return state is not None and state.status is status


async def test_keys_and_job_types_debounce_apart(
    make_debounced: Callable[..., JobRunner], clock: FakeClock, noted: Noted
) -> None:
    async with make_debounced() as runner:
        a = await runner.submit(Reindex(n=1), debounced("a"))
        b = await runner.submit(Reindex(n=2), debounced("b"))
        c = await runner.submit(Failing(n=3), debounced("a"))
        assert len({a.id, b.id, c.id}) == 3
        await advance(clock, WAIT)
        assert [await h.result(timeout=10) for h in (a, b, c)] == ["ran 1", "ran 2", "ran 3"]


async def test_a_retry_runs_the_input_the_first_attempt_took(
    make_debounced: Callable[..., JobRunner], clock: FakeClock, noted: Noted
) -> None:
    async with make_debounced() as runner:
        first = await runner.submit(Failing(n=1), debounced())
        second = await runner.submit(Failing(n=2), debounced())
        await advance(clock, WAIT)
        await wait_until(lambda: len(noted.ran) >= 1)
        # A submit while the run retries makes a new run: the window closed.
        third = await runner.submit(Failing(n=3), debounced())
        assert third.id != first.id
        await advance(clock, 5)
        assert await first.result(timeout=10) == await second.result(timeout=10) == "ran 2"
        await advance(clock, 5)
        assert await third.result(timeout=10) == "ran 3"
    assert [n for _, n, _ in noted.ran] == [2, 2, 3, 3]


async def test_a_window_whose_opener_died_before_enqueueing_gets_its_run(
    make_debounced: Callable[..., JobRunner], clock: FakeClock, store: MemoryStore, noted: Noted
) -> None:
    # What a submit that died between its write and its enqueue leaves: a
    # window with no run. The next submit of the key enqueues it.
    layout = Layout()
    windows = SharedObject(
        store,
        layout.debounce(limit_digest(Reindex.NAME, "doc-1")),
        clock,
        to_fields=rules.to_fields,
        from_fields=rules.from_fields,
    )
    data = Reindex(n=1).model_dump_json().encode()
    orphan = "ab" * 16
    await windows.update(
        lambda state, now: rules.join(
            state,
            job=Reindex.NAME,
            key="doc-1",
            run=orphan,
            data=data,
            wait=WAIT,
            max_wait=None,
            now=now,
        )
    )
    async with make_debounced() as runner:
        handle = await runner.submit(Reindex(n=2), debounced())
        assert handle.id == orphan and not handle.newly_submitted
        await advance(clock, WAIT)
        assert await handle.result(timeout=10) == "ran 2"


async def test_a_backlog_of_windows_is_refused_with_a_clear_error(
    make_debounced: Callable[..., JobRunner], clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rules, "MAX_WINDOWS", 2)
    runner = make_debounced()  # submits only: no worker takes the runs
    await runner.submit(Reindex(n=1), debounced(wait=0.5))
    await advance(clock, 1)
    await runner.submit(Reindex(n=2), debounced(wait=0.5))
    await advance(clock, 1)
    with pytest.raises(DebounceBacklog, match="is a worker running"):
        await runner.submit(Reindex(n=3), debounced(wait=0.5))
    await runner.close()


# -- every store, a real clock, racing submitters -----------------------------------------

RACE_WAIT, RACE_MAX_WAIT = 0.25, 0.7


async def test_racing_submitters_make_the_runs_the_rule_says_on_every_store(
    any_store: ObjectStore,
) -> None:
    noted = Noted()
    runner = JobRunner(any_store, jobs=[Reindex], state=[noted], poll_interval=0.02)
    options = debounced(wait=RACE_WAIT, max_wait=RACE_MAX_WAIT)
    submitters, each = 3, 12
    rng = random.Random(46)
    gaps = [[rng.choice((0.0, 0.02, 0.05, 0.35)) for _ in range(each)] for _ in range(submitters)]

    async def submitter(index: int) -> list[tuple[int, Any]]:
        made = []
        for turn, gap in enumerate(gaps[index]):
            n = index * 1000 + turn
            made.append((n, await runner.submit(Reindex(n=n), options)))
            await asyncio.sleep(gap)
        return made

    async with runner:
        made = [pair for part in await asyncio.gather(*map(submitter, range(3))) for pair in part]
        results = [await h.result(timeout=60) for _, h in made]
    submits = [
        Submit(n, h.debounced.run, h.debounced.count, h.debounced.at, result)
        for (n, h), result in zip(made, results, strict=True)
    ]
    figures = check(submits, [Ran(*note) for note in noted.ran], RACE_WAIT, RACE_MAX_WAIT)
    assert figures["submits"] == submitters * each
    assert time.time() > 0
