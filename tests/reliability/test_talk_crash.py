"""Streams and callbacks across SIGKILLed workers, on a directory and on S3
(moto): real worker processes (``rel_talk.py``) that kill themselves at the
dangerous points (a stream write's memo landed and its item not; the item
landed and the write not returned; a callback's completion read and what
the wait took not recorded; recorded and the completion not deleted), and
that the test kills at random times, restarted until every run has ended.

- Streams: readers in the test process, following every stream live from
  the start while the workers die, each get every item once, in order;
  each stream holds its items and its close, each once, at dense offsets.
- Callbacks: every attempt of a run hands out the same id (and URL); a
  completion made while no worker runs (through the runner, and on S3
  through the presigned URL with a plain HTTP PUT) resumes its run with
  that value; a second completion changes nothing.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest
from rel_jobs import read_events
from rel_support import Workers, wait_for
from rel_talk import AwaitsPayment, Writes, talk_runner

from stepstone import JobRunner, JobStatus

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "rel_talk.py"
RUNS = int(os.environ.get("REL_TALK_RUNS", "4"))
ITEMS = 40
DEADLINE = 240.0


KILLS = 4
"""Workers the test SIGKILLs itself in a run (the kill points kill more)."""


def talk_workers(location: str, tmp_path: Path, **env: str) -> Workers:
    """Worker processes of rel_talk.py on ``location``, their events in
    ``tmp_path/events.log``."""
    return Workers(location, tmp_path / "events.log", tmp_path / "logs", script=SCRIPT, **env)


async def keep_going(
    pool: Workers, until: asyncio.Task[Any], seed: int, workers: int, most: int = KILLS
) -> int:
    """Until ``until`` is done: restart workers that died at a kill point,
    and SIGKILL a random one, 2 to 4 seconds apart, up to ``most`` times (so
    the run ends whatever the machine's speed). Returns the kills made."""
    rng = random.Random(seed)
    kills = 0
    while not until.done():
        for proc in pool.dead():
            pool.restart(proc)
        while len(pool.alive()) < workers:
            pool.start()
        await asyncio.wait({until}, timeout=rng.uniform(2.0, 4.0))
        alive = pool.alive()
        if alive and not until.done() and kills < most:
            pool.kill(rng.choice(alive))
            kills += 1
    return kills


async def test_streams_read_live_lose_and_repeat_nothing_across_sigkills(
    tmp_path: Path, location: str
) -> None:
    events = tmp_path / "events.log"
    pool = talk_workers(
        location, tmp_path, REL_TALK_KILL="before_item=0.05,after_item=0.05", REL_SEED="20261206"
    )
    api = talk_runner(location)
    try:
        first = pool.start()
        await pool.ready(first)
        handles = [await api.submit(Writes(n=n, count=ITEMS)) for n in range(RUNS)]

        async def read(run_id: str) -> list[str]:
            return [value async for value in api.stream(run_id, "tokens", str)]

        async def read_to_the_end() -> tuple[list[list[str]], list[int]]:
            values = await asyncio.gather(*(read(handle.id) for handle in handles))
            return values, [await handle.result(timeout=DEADLINE) for handle in handles]

        # The workers are tended until the runs have ended, not only their
        # streams: a worker may die with a stream closed and its run not done.
        ending = asyncio.ensure_future(read_to_the_end())
        kills = await asyncio.wait_for(keep_going(pool, ending, 7, workers=2), DEADLINE)
        read_back, results = await ending
        stored = [await item_offsets(api, handle.id) for handle in handles]
        await pool.stop_all()
    finally:
        pool.kill_all()
        await api.store.close()
    self_kills = [e for e in read_events(str(events)) if e[0] == "KILL"]
    print(f"\nstreams: {kills} killed by the test, {len(self_kills)} at kill points")
    assert results == [ITEMS] * RUNS
    for n, values in enumerate(read_back):
        assert values == [f"{n}:{i}" for i in range(ITEMS)], f"run {n} read {values}"
    assert stored == [list(range(ITEMS + 1))] * RUNS, "an item written twice, or a hole"
    # (at odds of 0.05 a write, no kill at a point in 160 writes is a 1-in-3,000 chance)
    points = {e[1] for e in self_kills}
    assert points == {"before_item", "after_item"}, f"a kill point never hit: {points}"


async def item_offsets(runner: JobRunner, run_id: str) -> list[int]:
    prefix = runner.layout.streams(run_id)
    return sorted([int(info.key.rsplit("/", 1)[-1]) async for info in runner.store.scan(prefix)])


async def test_callbacks_keep_their_ids_and_take_one_completion_across_sigkills(
    tmp_path: Path, location: str
) -> None:
    events = tmp_path / "events.log"
    pool = talk_workers(
        location,
        tmp_path,
        # Each life takes one completion, then dies at its second (one run at
        # a time): before recording it, in one life, after, in the next.
        REL_TALK_KILL="before_take@2|after_take@2",
        REL_CONCURRENCY="1",
        REL_SEED="20261207",
    )
    api = talk_runner(location)
    try:
        first = pool.start()
        await pool.ready(first)
        handles = [await api.submit(AwaitsPayment(n=n)) for n in range(RUNS)]

        async def all_waiting() -> bool:
            for handle in handles:
                state = await api.status(handle.id)
                if state is None or state.status is not JobStatus.WAITING_FOR_CALLBACK:
                    return False
            return True

        await wait_for(all_waiting, 60, "every run to wait for its callback", 0.1)
        pool.kill(first)  # the runs wait on, with no worker anywhere
        made = callbacks(read_events(str(events)))
        wanted = {}
        for n, handle in enumerate(handles):
            callback_id, url = made[handle.id][0]
            value = {"amount": 100 + n, "by": f"payer-{n}"}
            if url != "none" and n % 2:  # on S3, half through the URL, as curl would
                async with httpx.AsyncClient() as http:
                    answer = await http.put(url, json=value)
                assert answer.status_code == 200, answer.text
            else:
                assert await api.complete_callback(callback_id, value) is True
            assert await api.complete_callback(callback_id, {"amount": 0, "by": "x"}) is False
            wanted[handle.id] = f"{100 + n} by payer-{n}"

        async def results() -> list[str]:
            return [await handle.result(timeout=DEADLINE) for handle in handles]

        ending = asyncio.ensure_future(results())
        # No kills of the test's own: each life is to reach its second take
        # (a random kill before it would skip that life's kill point).
        kills = await asyncio.wait_for(keep_going(pool, ending, 11, workers=1, most=0), DEADLINE)
        said = await ending
        await pool.stop_all()
    finally:
        pool.kill_all()
        await api.store.close()
    all_events = read_events(str(events))
    made = callbacks(all_events)
    takes = [e for e in all_events if e[0] == "KILL" and "take" in e[1]]
    print(f"\ncallbacks: {kills} killed by the test, {len(takes)} at a take")
    assert said == [wanted[handle.id] for handle in handles]
    for handle in handles:
        assert len(set(made[handle.id])) == 1, f"another id or URL on a replay: {made[handle.id]}"
    resumed = defaultdict(set)
    for e in all_events:
        if e[0] == "RESUMED":
            resumed[e[1]].add(e[3].replace("_", " "))
    assert {run: values for run, values in resumed.items()} == {
        run: {value} for run, value in wanted.items()
    }, "a run resumed with another value than its first completion"
    assert {e[1] for e in takes} == {"before_take", "after_take"}, takes


def callbacks(events: list[list[str]]) -> dict[str, list[tuple[str, str]]]:
    """Each run's callbacks as it made them, attempt after attempt: (id, url)."""
    made: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for e in events:
        if e[0] == "CALLBACK":
            made[e[1]].append((e[3], e[4]))
    return made
