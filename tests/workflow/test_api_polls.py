"""How a runner that runs no worker (an API process) waits for a run it
submitted: it polls the outcome record, first with a doubling backoff, then,
once it has seen a few runs of the job's kind end, about when that kind's
runs end (``stepstone.handles.poll_timing``). A steady stream of runs then costs a few
reads each; a run far slower than the rest still gets its answer."""

from __future__ import annotations

import asyncio

import pytest
from wf_jobs import Counters, GatedKeyed, Keyed

from stepstone import JobRunner
from stepstone.handles.handle import Submitted
from stepstone.handles.poll_timing import (
    EXPECTED_STEP,
    MAX_POLL,
    RECENT_FROM,
    RECENT_RUNS,
    TimeToOutcome,
    next_poll,
)
from stepstone.runtime import StoreQueue
from stepstone.store import MemoryStore
from stepstone.store.counting import GET, CountingStore

DEADLINE = 20.0
PICKUP = 0.25
"""How often the worker lists the queue: it finds a run submitted elsewhere
at its next listing, so each run takes about this long from submit to
outcome (a little more)."""
RUNS = 8


def worker_on(store: MemoryStore, job: type, counters: Counters) -> JobRunner:
    queue = StoreQueue(store, scan_interval=PICKUP, idle_scan_max=PICKUP)
    return JobRunner(store, queue=queue, jobs=[job], state=[counters], poll_interval=PICKUP)


async def test_an_api_process_reads_a_run_of_a_kind_it_knows_a_few_times() -> None:
    store = MemoryStore()
    api_store = CountingStore(store)
    worker = worker_on(store, Keyed, Counters())
    api = JobRunner(api_store)  # runs no worker: it polls for outcomes
    async with worker:
        for n in range(RECENT_FROM + 1):  # (what the kind's runs take, learned)
            assert await (await api.submit(Keyed(n=n))).result(timeout=DEADLINE) == n
        api_store.reset()
        for n in range(100, 100 + RUNS):
            assert await (await api.submit(Keyed(n=n))).result(timeout=DEADLINE) == n
    # Each run: the submit's two looks for an earlier outcome (a local store:
    # before and after the create), then the handle's polls. Doubling from
    # 20 ms, a run of about PICKUP takes 5; timed by its kind, about 3.
    reads = api_store.counts[GET] / RUNS
    assert reads <= 6.0, f"{reads:.2f} reads a run"
    await api.close()


async def test_a_run_far_slower_than_its_kind_still_gets_its_answer() -> None:
    store = MemoryStore()
    counters = Counters()
    counters.gate.set()
    worker = worker_on(store, GatedKeyed, counters)
    api = JobRunner(store)
    async with worker:
        for n in range(RECENT_FROM + 1):
            assert await (await api.submit(GatedKeyed(n=n))).result(timeout=DEADLINE) == n
        counters.gate.clear()
        counters.started.clear()
        slow = await api.submit(GatedKeyed(n=99))
        await asyncio.wait_for(counters.started.wait(), DEADLINE)
        await asyncio.sleep(8 * PICKUP)  # (the run is long: past the polls timed for it)
        counters.gate.set()
        assert await slow.result(timeout=DEADLINE) == 99
    await api.close()


def test_polls_step_through_the_expected_time_then_back_off() -> None:
    # Unknown kind: double from the last wait, up to MAX_POLL.
    assert next_poll(0.02, None, 0.02) == 0.04
    assert next_poll(0.8, None, 3.0) == MAX_POLL
    # Known: a step of the expected time while within 1.5 of it ...
    assert next_poll(0.8, 1.0, 0.8) == EXPECTED_STEP
    assert next_poll(EXPECTED_STEP, 1.0, 1.4) == EXPECTED_STEP
    # ... then doubling from that step, not from the long first wait.
    assert next_poll(0.8, 1.0, 1.6) == 2 * EXPECTED_STEP
    # A long kind's steps are no longer apart than the backoff's longest.
    assert next_poll(48.0, 60.0, 50.0) == MAX_POLL


def test_runs_are_polled_by_the_quicker_of_their_kind_seen_lately() -> None:
    seen = TimeToOutcome()
    seen.saw(Submitted("k", 10.0), last_miss=None, found=11.5)  # found at once: 1.5
    seen.saw(Submitted("k", 20.0), last_miss=21.0, found=21.4)  # between two polls: 1.2
    assert seen.expected("k") is None  # (too few yet)
    seen.saw(Submitted("k", 30.0), last_miss=None, found=35.0)
    assert seen.expected("k") == pytest.approx(1.2)  # (the quickest of the first few)
    assert seen.expected("other") is None
    for at in range(100, 100 + RECENT_RUNS - 3):  # (sixteen, the first three among them)
        seen.saw(Submitted("k", at), last_miss=None, found=at + 2.0)
    assert seen.expected("k") == 2.0  # two quicker runs in sixteen do not set the pace ...
    for at in range(200, 205):  # ... more than a quarter do
        seen.saw(Submitted("k", at), last_miss=None, found=at + 0.5)
    assert seen.expected("k") == 0.5
