"""A store with runs in several states, and ``stepstone ui`` serving it
(the real headless Chromium to look at it, ``browser``, is tests/conftest.py's).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # ui_jobs, for the test process and `stepstone ui`

from ui_jobs import Explode, Nap, Ship  # noqa: E402

from stepstone import JobRunner, SubmitOptions  # noqa: E402
from stepstone.ops import reads  # noqa: E402
from stepstone.testing import wait_until, wait_until_sync  # noqa: E402

pytest.importorskip("starlette", reason="the web view needs the ui extra: pip install -e '.[ui]'")
pytest.importorskip("uvicorn", reason="the web view needs the ui extra: pip install -e '.[ui]'")

DEADLINE = 30.0


@dataclass
class Runs:
    """The store (its URL) and the ids of its runs, one per state."""

    store: str
    succeeded: str
    dead: str
    scheduled: str
    sleeping: str

    def runner(self) -> JobRunner:
        return JobRunner(self.store, jobs=[Ship, Explode, Nap], retry_backoff=0.0)


SHOWN_BUCKET = "acme-jobs"
"""The bucket a test parametrized with ``store_url="s3"`` uses: the page
heads itself with the store's name, and a screenshot for the docs should show
this one, not a temporary directory of the machine that took it."""


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


async def status_of(store: str, run_id: str) -> str:
    """Where the run is, as the view and ``stepstone show`` say (dead, not failed)."""
    runner = JobRunner(store)  # not started: no worker takes up what it reads
    try:
        found = await reads.detail(runner, run_id)
    finally:
        await runner.close()
    assert found.status is not None
    return found.status.value


@pytest.fixture
def ui(runs: Runs, tmp_path: Path) -> Iterator[str]:
    """``stepstone ui`` on the store, a free port, refreshing every half second;
    yields the URL it printed."""
    with serve(runs.store, tmp_path) as url:
        yield url


@contextlib.contextmanager
def serve(store: str, tmp_path: Path, *options: str) -> Iterator[str]:
    """``stepstone ui STORE --port 0 --refresh 0.5 OPTIONS`` until the block
    ends, stopped as Ctrl-C would; yields the URL its first line printed (the
    line itself is left in ``tmp_path/first-line``)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    err_path = tmp_path / "ui.err"
    err = err_path.open("w")
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "stepstone", "ui", store),
            *("--port", "0", "--refresh", "0.5", *options),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        (tmp_path / "first-line").write_text(line)
        found = re.search(r"(http://\S+/)", line)
        assert found, f"stepstone ui said {line!r}; stderr: {err_path.read_text()}"
        yield found.group(1)
        proc.terminate()
        assert proc.wait(timeout=DEADLINE) == 0, err_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        err.close()


def wait_for(condition: Any, what: str, timeout: float = DEADLINE) -> None:
    """Poll ``condition()`` (a browser is another process) until true or fail."""
    wait_until_sync(condition, timeout=timeout, interval=0.05, message=what)
