"""A store with runs in several states, and ``stepstone ui`` serving it
(the real headless Chromium to look at it, ``browser``, is tests/conftest.py's;
what the tests import is ui_kit.py's).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # ui_jobs and ui_kit, for the test process and `stepstone ui`

from ui_jobs import Explode, Nap, Ship  # noqa: E402
from ui_kit import DEADLINE, SHOWN_BUCKET, Runs, serve  # noqa: E402

from stepstone import JobRunner, SubmitOptions  # noqa: E402
from stepstone.testing import wait_until  # noqa: E402

pytest.importorskip("starlette", reason="the web view needs the ui extra: pip install -e '.[ui]'")
pytest.importorskip("uvicorn", reason="the web view needs the ui extra: pip install -e '.[ui]'")


@pytest.fixture
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store the runs are kept in: a directory, or (``indirect`` param
    ``"s3"``) ``s3://acme-jobs/prod`` on the moto server, emptied first."""
    if getattr(request, "param", "dir") != "s3":
        store = tmp_path / "store"
        store.mkdir()
        return str(store)
    endpoint = request.getfixturevalue("moto_server")
    admin = request.getfixturevalue("s3_admin")
    if SHOWN_BUCKET not in {b["Name"] for b in admin.list_buckets()["Buckets"]}:
        admin.create_bucket(Bucket=SHOWN_BUCKET)
    for listed in admin.get_paginator("list_objects_v2").paginate(Bucket=SHOWN_BUCKET):
        for obj in listed.get("Contents", []):
            admin.delete_object(Bucket=SHOWN_BUCKET, Key=obj["Key"])
    return f"s3://{SHOWN_BUCKET}/prod?endpoint_url={endpoint}&region=us-east-1"


@pytest.fixture
async def runs(store_url: str) -> AsyncIterator[Runs]:
    """A store holding a succeeded run (three steps), a dead one (whose
    error and memo are hostile text), a scheduled one and a sleeping one."""
    runner = JobRunner(store_url, jobs=[Ship, Explode, Nap], retry_backoff=0.0, poll_interval=0.05)
    async with runner:
        scheduled = await runner.submit(
            Ship(order="later"), SubmitOptions(run_at=datetime.now(UTC) + timedelta(hours=2))
        )
        shipped = await runner.submit(Ship(order="o-1"))
        assert await shipped.result(timeout=DEADLINE) == "sent label-o-1"
        exploded = await runner.submit(Explode())
        assert not (await exploded.join(timeout=DEADLINE)).ok
        napping = await runner.submit(Nap())

        async def asleep() -> bool:
            state = await runner.status(napping.id)
            return state is not None and state.status == "sleeping"

        await wait_until(asleep, timeout=DEADLINE)
    await runner.close()
    yield Runs(store_url, shipped.id, exploded.id, scheduled.id, napping.id)


@pytest.fixture
def ui(runs: Runs, tmp_path: Path) -> Iterator[str]:
    """``stepstone ui`` on the store, a free port, refreshing every half second;
    yields the URL it printed."""
    with serve(runs.store, tmp_path) as url:
        yield url
