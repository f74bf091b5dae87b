"""The throughput page: runs finished and failed over the last hour and day,
counted right, each outcome read once however often the page refreshes, and
drawn in a real headless browser with every label as text.
"""

from __future__ import annotations

import os
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_browser import click, screenshot_of, text
from ui_kit import serve, wait_for

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from benchmarks.counting import CountingStore
from benchmarks.ui_scale import Seeded, ask, seed
from stepstone import JobRunner
from stepstone.records.outcome import OutcomeRecord
from stepstone.runtime import FakeClock
from stepstone.runtime.status import JobStatus
from stepstone.store.file import FileStore
from stepstone.testing import wait_until
from stepstone.ui.app import create_app


def expected(store: Seeded, since: float) -> Counter[str]:
    """The seeded outcomes written after ``since``, by status, read from the files."""
    found: Counter[str] = Counter()
    for path in (store.root / "outcomes").iterdir():
        if path.stat().st_mtime >= since:
            found[OutcomeRecord.decode(path.read_bytes()).status.value] += 1
    return found


def totals(body: bytes) -> list[dict[str, int]]:
    """Each section's totals as the page states them."""
    out = []
    for section in re.findall(rb'<p class="totals">(.*?)</p>', body):
        numbers = re.findall(rb'<span class="n (\w+)">(\d+)</span>', section)
        out.append({name.decode(): int(n) for name, n in numbers})
    return out


async def test_each_outcome_is_read_once_and_counted_in_its_minute_and_hour(
    tmp_path: Path,
) -> None:
    now = time.time()
    store = seed(
        tmp_path / "store", finished=400, live=10, now=now, rng=random.Random(5), spread=2 * 86400
    )
    counting = CountingStore(FileStore(store.root))
    # The page's "now" is the seeding's: on a loaded machine seconds pass
    # between them, and an outcome seeded just inside the hour or the day
    # fell out of the page's.
    runner = JobRunner(counting, clock=FakeClock(now))
    app = create_app(runner, refresh=1.0, hosts=["testserver"])
    try:
        status, body = await ask(app, "/throughput")
        assert status == 200
        day, hour = expected(store, now - 86400), expected(store, now - 3600)
        assert counting.snapshot()["GET"] == sum(day.values())  # each of the day's, once
        for shown, want in zip(totals(body), (hour, day), strict=True):
            assert shown == {
                "finished": sum(want.values()),
                **{s: want[s] for s in shown if s != "finished"},
            }
        counting.reset()
        status, body = await ask(app, "/throughput")
        assert status == 200 and counting.snapshot()["GET"] == 0  # a refresh reads nothing known
        late = OutcomeRecord.decode((store.root / "outcomes" / store.finished[0]).read_bytes())
        newer = OutcomeRecord(
            "f" * 32, "mail.send", JobStatus.FAILED, late.input_hash, late.incarnation, 1, now
        )
        await counting.put(runner.layout.outcome(newer.run_id), newer.encode())
        # (finished at the page's now, which stands still)
        os.utime(store.root / runner.layout.outcome(newer.run_id), (now, now))
        counting.reset()

        async def counted() -> bool:  # once a listing has it
            nonlocal body
            _, body = await ask(app, "/throughput")
            return bool(totals(body)[0]["failed"] != hour["failed"])

        await wait_until(counted, timeout=30, message="the new outcome counted")
        assert totals(body)[0]["failed"] == hour["failed"] + 1
        assert counting.snapshot()["GET"] == 1  # only the run that finished since, once
    finally:
        await app.state.finished.close()
        await runner.close()


@pytest.mark.slow
def test_the_throughput_page_draws_its_charts_in_a_browser(tmp_path: Path, browser: Any) -> None:
    now = time.time()
    store = seed(
        tmp_path / "store", finished=900, live=10, now=now, rng=random.Random(9), spread=86400
    )
    with serve(str(store.root), tmp_path) as ui:
        browser.get(ui)
        click(browser, "header nav a", "Throughput")
        wait_for(lambda: browser.title == "Throughput · stepstone", "the throughput page")
        bars = browser.execute_script(
            """return [...document.querySelectorAll("svg.chart")].map((svg) =>
                [...svg.querySelectorAll("g.bar")].map((g) => [
                    Number(g.dataset.finished), Number(g.dataset.failed),
                    g.querySelector("title").textContent]))"""
        )
        hour, day = bars
        assert len(hour) == 60 and len(day) == 24
        want = expected(store, now - 86400)
        assert sum(b[0] for b in day) == sum(want.values())
        assert sum(b[1] for b in day) == want["failed"]
        # A bar's title names its times as dates and its counts in words.
        assert re.fullmatch(
            r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ to \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ: .*", day[-1][2]
        )
        assert "succeeded" in " ".join(b[2] for b in day)
        assert "Last hour" in text(browser, "main")
        screenshot = tmp_path / "ui-throughput.png"
        screenshot_of(browser, "main", screenshot)
