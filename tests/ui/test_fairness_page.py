"""A run's page says its fairness key (and weight) while it is queued."""

from __future__ import annotations

from pathlib import Path

from test_pages import get
from ui_jobs import Explode, Nap, Ship
from ui_kit import serve

from stepstone import JobRunner, SubmitOptions


async def test_a_queued_runs_page_shows_its_fairness_key(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    runner = JobRunner(str(store), jobs=[Ship, Explode, Nap])  # no worker: it stays queued
    try:
        keyed = await runner.submit(
            Ship(order="o-1"), SubmitOptions(fairness_key="tenant-a", fairness_weight=2)
        )
        plain = await runner.submit(Ship(order="o-2"))
    finally:
        await runner.close()
    with serve(str(store), tmp_path) as url:
        status, _, html = get(url + f"runs/{keyed.id}")
        assert status == 200, html
        assert "<dt>Fairness key</dt><dd>tenant-a (weight 2)</dd>" in html
        status, _, html = get(url + f"runs/{plain.id}")
        assert status == 200 and "Fairness key" not in html
