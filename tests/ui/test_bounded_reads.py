"""What a page of the web view reads per refresh does not grow with the
runs a store holds: the same requests, counted exactly, on a store of 1,200
finished runs and on one of 2,400 (the records seeded as the benchmark seeds
them: benchmarks/ui_scale.py, which times them at 100,000 and 5,000 live);
and a view just started over more live runs than a refresh may read.

A refresh reads at most ``QUEUE_READS`` queue records (those new or changed
since the last: none here), at most ``OUTCOME_READS`` outcome records, and
lists the outcomes beside the page (:mod:`stepstone.ops.finished`); a run's
page reads that run's records.
"""

from __future__ import annotations

import os
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_browser import text
from ui_kit import DEADLINE, serve, wait_for

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from benchmarks.counting import CountingStore
from benchmarks.ui_scale import Seeded, ask, seed
from stepstone import JobRunner
from stepstone.store.file import FileStore
from stepstone.testing import wait_until
from stepstone.ui.app import create_app
from stepstone.ui.routes import OUTCOME_READS, QUEUE_READS

LIVE = 40


def seeded(root: Path, finished: int) -> Seeded:
    return seed(root, finished=finished, live=LIVE, now=time.time(), rng=random.Random(3))


def paths(store: Seeded) -> dict[str, str]:
    return {
        "runs": "/",
        "succeeded": "/?state=succeeded",
        "failed": "/?state=failed",
        "ready": "/?state=ready",
        "rare kind": "/?kind=audit.rare",
        "key prefix": "/?key=no-such-key-",
        "finished run": f"/runs/{store.finished[0]}",
        "parent run": f"/runs/{store.parent}",
        "running run": f"/runs/{store.live['running'][0]}",
    }


async def listed(app: Any) -> None:
    """Once the view's listing of finished runs is complete."""

    async def complete() -> bool:
        return await app.state.finished.latest(wait=0.05) is not None

    await wait_until(complete, timeout=DEADLINE, interval=0, message="the listing of finished runs")


async def refresh_reads(store: Seeded) -> dict[str, dict[str, int]]:
    """Per page: the GETs and HEADs of a refresh (after the first load)."""
    counting = CountingStore(FileStore(store.root))
    runner = JobRunner(counting)
    app = create_app(runner, refresh=1.0, hosts=["testserver"])
    out: dict[str, dict[str, int]] = {}
    try:
        for name, path in paths(store).items():
            status, body = await ask(app, path)
            assert status == 200, body[:500]
            await listed(app)
            counting.reset()
            status, _ = await ask(app, path)
            assert status == 200
            taken = counting.snapshot()
            assert taken["PUT"] == taken["CPUT"] == taken["DELETE"] == 0, name
            out[name] = {"GET": taken["GET"], "HEAD": taken["HEAD"]}
    finally:
        await app.state.finished.close()
        await runner.close()
    return out


@pytest.mark.slow
async def test_a_pages_reads_do_not_grow_with_the_finished_runs(tmp_path: Path) -> None:
    small = await refresh_reads(seeded(tmp_path / "small", 1200))
    large = await refresh_reads(seeded(tmp_path / "large", 2400))
    assert small == large
    dead = 1  # a dead run's failed outcome, read beside its queue record
    assert large == {
        "runs": {"GET": 100 + dead, "HEAD": 0},  # the newest hundred, all finished
        # Read a hundred at a time: the newest hundred held a few that did not succeed.
        "succeeded": {"GET": 200, "HEAD": 0},
        "failed": {"GET": OUTCOME_READS, "HEAD": 0},  # few fail: the budget, no more
        "ready": {"GET": 0, "HEAD": 0},  # queue records are read once, then as they change
        "rare kind": {"GET": OUTCOME_READS, "HEAD": 0},
        "key prefix": {"GET": OUTCOME_READS, "HEAD": 0},
        "finished run": {"GET": 4, "HEAD": 0},
        "parent run": {"GET": 4 + 2 * 5, "HEAD": 0},  # and its five children's records
        "running run": {"GET": 3, "HEAD": 0},
    }


MANY_LIVE = QUEUE_READS + 150


def unread_notice(body: str) -> str | None:
    found = re.search(r'<p class="note queue-unread">(.*?)</p>', body, re.S)
    return None if found is None else found.group(1)


def counted(body: str) -> int:
    """The queue's counts by state as the page states them, summed."""
    return sum(int(n) for n in re.findall(r'<span class="n">(\d+)</span>', body))


@pytest.mark.slow
async def test_a_views_first_refreshes_read_at_most_the_budget_of_queue_records(
    tmp_path: Path,
) -> None:
    """More live runs than a refresh may read: the first page reads the
    budget, says how many it has not read and counts only those it has; the
    next reads the rest; after that, none."""
    store = seed(tmp_path / "s", finished=50, live=MANY_LIVE, now=time.time(), rng=random.Random(5))
    queued = sum(len(ids) for ids in store.live.values())  # the live runs and the dead
    counting = CountingStore(FileStore(store.root))
    runner = JobRunner(counting)
    app = create_app(runner, refresh=1.0, hosts=["testserver"])
    try:
        reads: list[int] = []
        notices: list[str | None] = []
        counts: list[int] = []
        partial: list[bool] = []
        for _ in range(3):
            counting.reset()
            status, body = await ask(app, "/?state=ready")
            assert status == 200, body[:500]
            reads.append(counting.snapshot()["GET"])
            page = body.decode()
            notices.append(unread_notice(page))
            counts.append(counted(page))
            partial.append(f"partial: {QUEUE_READS} of {queued} records read" in page)
        assert reads == [QUEUE_READS, queued - QUEUE_READS, 0]
        assert notices[0] is not None
        assert f"{queued} runs are in the queue" in notices[0]
        assert f"{queued - QUEUE_READS} of them not read yet" in notices[0]
        assert notices[1:] == [None, None]
        assert counts == [QUEUE_READS, queued, queued]
        assert partial == [True, False, False]
    finally:
        await app.state.finished.close()
        await runner.close()


@pytest.mark.slow
def test_the_runs_list_says_which_live_runs_it_has_not_read_yet_in_a_browser(
    tmp_path: Path, browser: Any
) -> None:
    store = seed(tmp_path / "s", finished=20, live=MANY_LIVE, now=time.time(), rng=random.Random(6))
    queued = sum(len(ids) for ids in store.live.values())  # the live runs and the dead
    with serve(str(store.root), tmp_path, "--refresh", "3") as ui:
        browser.get(ui)
        notice = text(browser, "p.queue-unread")
        assert f"{queued - QUEUE_READS} of them not read yet" in notice, notice
        assert f"partial: {QUEUE_READS} of {queued} records read" in text(browser, ".counts h2")
        # The next refresh reads the rest: the notice goes, the counts are whole.
        wait_for(
            lambda: browser.execute_script("return !document.querySelector('p.queue-unread')"),
            "the notice to go once every live run is read",
        )
        assert text(browser, ".counts h2") == "Queue"
        shown = browser.execute_script(
            "return [...document.querySelectorAll('.counts .n')].map((e) => +e.innerText)"
        )
        assert sum(shown) == queued
