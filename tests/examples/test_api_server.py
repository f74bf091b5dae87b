"""examples/api_server.py through FastAPI's TestClient: idempotent POSTs, 409 on
a reused key, status/progress/result on GET, across a restart, and on S3."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "fastapi", reason="the API example needs the examples extra: pip install -e '.[examples]'"
)
pytest.importorskip(
    "httpx", reason="FastAPI's TestClient needs the examples extra: pip install -e '.[examples]'"
)

with warnings.catch_warnings():  # starlette's notice about httpx's successor, not ours
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

REPO = Path(__file__).parents[2]
sys.path.insert(0, str(REPO / "examples"))

from api_server import PaymentGateway, create_app, make_runner  # noqa: E402

from stepstone.testing import fail_once, wait_until_sync  # noqa: E402

ORDER = {
    "customer": "ada",
    "items": [{"sku": "book", "quantity": 2}, {"sku": "pen", "quantity": 1}],
}
TOTAL = 2 * 1250 + 199
DEADLINE = 30.0


def until_finished(client: TestClient, job_id: str) -> dict[str, Any]:
    """GET the job until it has finished; fail at the deadline with its last state."""
    last: dict[str, Any] = {}

    def finished() -> bool:
        last.update(client.get(f"/jobs/{job_id}").json())
        return last["status"] in ("succeeded", "failed", "cancelled")

    wait_until_sync(finished, timeout=DEADLINE, interval=0.02, message=f"job {job_id} to finish")
    return last


def post(client: TestClient, key: str | None, order: dict[str, Any] = ORDER) -> Any:
    headers = {} if key is None else {"Idempotency-Key": key}
    return client.post("/orders", json=order, headers=headers)


def test_orders_are_idempotent_by_key_and_survive_a_restart(tmp_path: Path) -> None:
    store = str(tmp_path / "orders")
    Path(store).mkdir()
    payments = PaymentGateway()
    payments.charge = fail_once(payments.charge)  # type: ignore[method-assign]

    with TestClient(
        create_app(make_runner(store, payments=payments, poll_interval=0.05, retry_backoff=0))
    ) as client:
        assert post(client, None).status_code == 400

        first = post(client, "order-1")
        assert first.status_code == 202, first.text
        job_id = first.json()["run_id"]
        assert first.json()["newly_submitted"] is True
        assert first.headers["location"].endswith(f"/jobs/{job_id}")

        again = post(client, "order-1")
        assert again.status_code == 202
        assert again.json()["run_id"] == job_id and again.json()["newly_submitted"] is False

        changed = {**ORDER, "customer": "bob"}
        conflict = post(client, "order-1", changed)
        assert conflict.status_code == 409, conflict.text
        assert "different request" in conflict.json()["detail"]

        done = until_finished(client, job_id)
        assert done["status"] == "succeeded", done
        assert done["result"]["total_cents"] == TOTAL
        assert done["result"]["receipt"] == "rcpt-000001"
        assert done["attempts"] == 2, "the injected charge failure should have cost one attempt"
        assert done["progress"] == {"stage": "done", "done": 3, "of": 3}
        assert payments.charges == [("ada", TOTAL)], "charged more than once"

        after = post(client, "order-1")
        assert after.json() == {**again.json(), "status_url": after.json()["status_url"]}
        assert post(client, "order-1", changed).status_code == 409

        assert client.get("/jobs/" + "0" * 32).status_code == 404
        assert client.get("/jobs/not-a-job").status_code == 404

    # A restart: a new app and runner on the same store answer from the records.
    fresh = PaymentGateway()
    with TestClient(create_app(make_runner(store, payments=fresh, poll_interval=0.05))) as client:
        replay = post(client, "order-1")
        assert replay.status_code == 202 and replay.json()["run_id"] == job_id
        assert replay.json()["newly_submitted"] is False
        assert client.get(f"/jobs/{job_id}").json()["result"]["total_cents"] == TOTAL
        assert post(client, "order-1", changed).status_code == 409
    assert fresh.charges == [], "a resubmission after a restart ran the order again"


@pytest.mark.slow
def test_orders_on_s3(stepstone_s3_url: str) -> None:
    """The same app on a bucket (moto, through the testing kit's fixtures)."""
    with TestClient(create_app(make_runner(stepstone_s3_url, poll_interval=0.05))) as client:
        job_id = post(client, "s3-order").json()["run_id"]
        assert post(client, "s3-order").json()["run_id"] == job_id
        done = until_finished(client, job_id)
        assert done["status"] == "succeeded" and done["result"]["total_cents"] == TOTAL


def test_the_api_submits_and_a_separate_worker_process_runs(tmp_path: Path) -> None:
    """The production shape from the module's docstring: the API with
    RUN_WORKER=0, ``stepstone worker examples.api_server:make_runner`` elsewhere."""
    store = str(tmp_path / "orders")
    Path(store).mkdir()
    log = tmp_path / "worker.log"
    with log.open("w") as err:
        worker = subprocess.Popen(
            [sys.executable, "-m", "stepstone", "worker", "examples.api_server:make_runner"],
            cwd=REPO,
            env={**os.environ, "STEPSTONE_STORE": store},
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        app = create_app(make_runner(store), run_worker=False)
        with TestClient(app) as client:
            job_id = post(client, "split-1").json()["run_id"]
            done = until_finished(client, job_id)
            assert done["status"] == "succeeded", done
            assert done["result"]["total_cents"] == TOTAL
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=DEADLINE) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert job_id in log.read_text(), "the worker process did not run the job"
