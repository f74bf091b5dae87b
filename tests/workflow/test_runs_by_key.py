"""Every run can be reached by the idempotency key it was submitted with,
from a process that never held its Job: ``IdempotencyKey`` in the API
(status, send_event, handle, history, replay, cancel, retry), ``--key`` on
every command of the CLI that takes a run.

The worker runs in the test process on a real directory store; the API
process (key_api.py) and the CLI are separate processes that do not import
the jobs' module (key_jobs.py), so nothing there could have computed a run
id from a Job.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from key_jobs import Ingest, Picky

from stepstone import IdempotencyKey, JobRunner, JobStatus
from stepstone.testing import wait_until

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
DEADLINE = 60.0


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The directory the jobs and the test share (KEYS_DIR)."""
    path = tmp_path / "shared"
    path.mkdir()
    monkeypatch.setenv("KEYS_DIR", str(path))
    return path


@pytest.fixture
async def worker(tmp_path: Path, shared: Path) -> AsyncIterator[JobRunner]:
    """The worker, in this process, on a directory store."""
    store = tmp_path / "store"
    store.mkdir()
    runner = JobRunner(str(store), jobs=[Ingest, Picky], poll_interval=0.05)
    async with runner:
        yield runner


async def run(*argv: str, cwd: Path = HERE) -> tuple[int, str, str]:
    """A separate process, to its end (the worker goes on meanwhile)."""
    env = {**os.environ, "PYTHONPATH": ""}  # nothing of the tests on its path
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=str(cwd),
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), DEADLINE * 3)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_an_api_process_reaches_every_run_by_its_key(
    worker: JobRunner, shared: Path, tmp_path: Path
) -> None:
    for job in (Ingest(doc="42"), Ingest(doc="43"), Picky(n=1)):
        await worker.submit(job)
    status, out, err = await run(
        sys.executable, str(HERE / "key_api.py"), str(worker.store.location), str(shared)
    )
    assert status == 0, err
    said: dict[str, Any] = json.loads(out)
    assert said["run_id"] == IdempotencyKey("doc:42").run_id
    assert said["waiting_for"] == "approved"
    assert (said["sent"], said["sent_again"]) == (True, False)
    # No job type here: the result as decoded, the model's fields.
    assert said["result"] == {"doc": "42", "approved_by": "ada", "stores": 1}
    assert said["history"] == ["suspended", "succeeded"]
    assert said["replayed_kept"] == 2  # fetch, and the approval taken
    assert said["replay_result"] == {"doc": "42", "approved_by": "ada", "stores": 2}
    assert (said["cancelled"], said["cancelled_status"]) == (True, "cancelled")
    assert said["picky_failed"] == "permanent"
    assert said["picky_result"] == 1
    assert said["nobody_status"] is None
    assert "no live run" in said["nobody_event"], said["nobody_event"]
    assert said["jobs_imported"] is False

    # What the API process did is what this process sees, typed here.
    handle = worker.handle(IdempotencyKey("doc:42"), Ingest)
    assert (await handle.result(timeout=DEADLINE)).stores == 2


async def cli(*argv: str) -> tuple[int, str, str]:
    return await run(sys.executable, "-m", "stepstone", *argv)


async def test_every_cli_command_on_a_run_takes_its_key(worker: JobRunner, shared: Path) -> None:
    store = ["--store", str(worker.store.location)]
    waiting = await worker.submit(Ingest(doc="50"))
    other = await worker.submit(Ingest(doc="51"))
    picky = await worker.submit(Picky(n=2))

    async def status_of(handle_id: str) -> JobStatus | None:
        state = await worker.status(handle_id)
        return None if state is None else state.status

    for run_id in (waiting.id, other.id):
        await wait_until(
            lambda r=run_id: _is(status_of(r), JobStatus.WAITING_FOR_EVENT), timeout=DEADLINE
        )
    await wait_until(lambda: _is(status_of(picky.id), JobStatus.FAILED), timeout=DEADLINE)

    code, out, err = await cli("show", "--key", "doc:50", "--json", *store)
    assert code == 0, err
    assert (json.loads(out)["id"], json.loads(out)["status"]) == (waiting.id, "waiting_for_event")

    code, out, err = await cli(
        "send-event", "--key", "doc:50", "approved", "--payload", '{"by": "bob"}', *store
    )
    assert (code, out) == (0, f"sent event 'approved' to {waiting.id}\n"), err
    assert (await waiting.result(timeout=DEADLINE)).approved_by == "bob"

    code, out, err = await cli("history", "--key", "doc:50", "--json", *store)
    assert code == 0, err
    assert [a["result"] for a in json.loads(out)["attempts"]] == ["suspended", "succeeded"]
    code, out, err = await cli("history", "--key", "doc:50", *store)
    assert out.startswith(f"run {waiting.id} (succeeded)\nattempts (2, by claim):\n"), out

    code, out, err = await cli("replay", "--key", "doc:50", "--from-step", "store", *store)
    assert code == 0 and out.startswith(f"replaying {waiting.id} from step 'store'"), err
    assert (await worker.handle(waiting.id, Ingest).result(timeout=DEADLINE)).stores == 2

    code, out, err = await cli("cancel", "--key", "doc:51", *store)
    assert (code, out) == (0, f"cancelled {other.id}\n"), err

    (shared / "allow-2").touch()
    code, out, err = await cli("retry", "--key", "picky:2", *store)
    assert code == 0 and out.startswith(f"requeued {picky.id}"), err
    assert await worker.handle(picky.id, Picky).result(timeout=DEADLINE) == 2

    # What goes wrong says which key, in one line, and changes nothing.
    code, out, err = await cli("cancel", "--key", "doc:nope", *store)
    assert code == 1 and err.count("\n") == 1, err
    assert "idempotency key 'doc:nope'" in err and "no run" in err
    code, out, err = await cli("send-event", "--key", "doc:51", "approved", *store)
    assert code == 1 and "doc:51" in err and "has finished (cancelled)" in err, err
    code, out, err = await cli("send-event", "--key", "doc:50", "x", "--payload", "{bad", *store)
    assert code == 2 and "--payload is not JSON" in err, err
    code, out, err = await cli("retry", "--key", "doc:50", waiting.id, *store)
    assert code == 2 and "--key" in err, err
    code, out, err = await cli("cancel", "--key", "doc:50", "--kind", "keys.ingest", *store)
    assert code == 2 and "not both" in err, err


async def _is(state: Any, wanted: JobStatus) -> bool:
    return bool(await state is wanted)
