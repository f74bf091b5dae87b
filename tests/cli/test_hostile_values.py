"""Records that decode but hold values no run could have written: a time of
``inf`` or ``1e20``, a claim number of two million, a NaN. ``show`` and the
web view's run page answer with the rest of the run and one line naming the
record, in bounded time and size; ``schedules`` answers in one line whatever
a marker holds.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
from cli_app import Boom
from cli_support import DEADLINE, Cli, file_runner

from stepstone.records.attempts import AttemptInfo, AttemptResult, encode
from stepstone.records.codec import pack
from stepstone.records.layout import Layout
from stepstone.records.outcome import OutcomeRecord

LAYOUT = Layout("")


def _attempt(**values: Any) -> bytes:
    info = AttemptInfo(claim=1, number=1, result=AttemptResult.FAILED, claimed_at=1.8e9)
    return encode(dataclasses.replace(info, **values))


HOSTILE = {
    "claimed_at 1e20": ("attempt", {"claimed_at": 1e20}),
    "claimed_at inf": ("attempt", {"claimed_at": math.inf}),
    "ended_at nan": ("attempt", {"ended_at": math.nan}),
    "claim 2000000": ("attempt", {"claim": 2_000_000}),
    "finished_at 1e20": ("outcome", {"finished_at": 1e20}),
    "claimed_at -inf": ("outcome", {"claimed_at": -math.inf}),
    "attempts -5": ("outcome", {"attempts": -5}),
}


@pytest.fixture
async def dead_run(store_dir: Path) -> tuple[str, OutcomeRecord]:
    """A dead run: its outcome record, and attempt records of its claims."""
    async with file_runner(store_dir) as runner:
        handle = await runner.submit(Boom(n=1))
        outcome = await handle.join(timeout=DEADLINE)
        assert not outcome.ok
    data = (store_dir / LAYOUT.outcome(handle.id)).read_bytes()
    return handle.id, OutcomeRecord.decode(data)


def _spoil(store_dir: Path, run_id: str, record: OutcomeRecord, which: str) -> str:
    kind, values = HOSTILE[which]
    if kind == "outcome":
        key = LAYOUT.outcome(run_id)
        (store_dir / key).write_bytes(dataclasses.replace(record, **values).encode())
    else:
        key = LAYOUT.attempt(run_id, record.incarnation, values.get("claim", 1))
        (store_dir / key).parent.mkdir(parents=True, exist_ok=True)
        (store_dir / key).write_bytes(_attempt(**values))
    return key


@pytest.mark.parametrize("which", list(HOSTILE))
def test_show_names_a_record_holding_what_could_not_be_real(
    cli: Cli, store_dir: Path, dead_run: tuple[str, OutcomeRecord], which: str
) -> None:
    run_id, record = dead_run
    key = _spoil(store_dir, run_id, record, which)
    for form in ([], ["--json"]):
        shown = cli("show", run_id, *form, "--store", str(store_dir))
        assert shown.status == 0, shown.err
        assert "Traceback" not in shown.err, shown.err
        assert len(shown.out) < 100_000  # not a line per claim a record says it had
        assert all(line.startswith("stepstone: warning: ") for line in shown.err.splitlines())
        assert key in shown.out + shown.err, "the record was taken as it is"


@pytest.mark.parametrize("which", list(HOSTILE))
async def test_the_run_page_answers_whatever_a_record_holds(
    store_dir: Path, dead_run: tuple[str, OutcomeRecord], which: str
) -> None:
    pytest.importorskip("starlette", reason="the web view needs the ui extra")
    import httpx

    from stepstone import JobRunner
    from stepstone.ui.app import create_app

    run_id, record = dead_run
    key = _spoil(store_dir, run_id, record, which)
    runner = JobRunner(str(store_dir))
    try:
        app = create_app(runner, refresh=0, hosts=["localhost"])
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            page = await client.get(f"/runs/{run_id}")
            listing = await client.get("/")
    finally:
        await runner.close()
    assert page.status_code == 200, page.text[:2000]
    assert key in page.text  # named as a record that cannot be read
    assert len(page.text) < 500_000
    assert listing.status_code == 200


MARKERS = {
    "inf": pack({"tick": math.inf}),
    "nan": pack({"tick": math.nan}),
    "1e20": pack({"tick": 1e20}),
    "-1e12": pack({"tick": -1e12}),
    "ten years ahead": None,
    "a string": pack({"tick": "soon"}),
    "a list": pack({"tick": [1, 2]}),
    "no tick": pack({"tock": 1.0}),
    "garbage": b"\xc1\xff not msgpack",
}


@pytest.mark.parametrize("which", list(MARKERS))
def test_schedules_answers_whatever_a_marker_holds(cli: Cli, store_dir: Path, which: str) -> None:
    import time

    data = MARKERS[which]
    if data is None:
        data = pack({"tick": time.time() + 10 * 365 * 86_400})
    key = store_dir / LAYOUT.schedule("greet-hourly")
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_bytes(data)
    env = {"STEPSTONE_STORE": str(store_dir)}
    for form in ([], ["--json"]):
        listed = cli("schedules", *form, "--app", "cli_app:make_scheduled_runner", env=env)
        assert listed.status == 0, listed.err
        assert "Traceback" not in listed.err, listed.err
        [warning] = listed.err.splitlines()
        marker = LAYOUT.schedule("greet-hourly")
        assert warning.startswith(f"stepstone: warning: cannot read {marker}: its marker cannot")
