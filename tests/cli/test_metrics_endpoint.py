"""``stepstone worker --metrics-port``: a real worker process, scraped over HTTP.

Jobs that succeed, fail once then succeed, and fail for good run in the
worker; the Prometheus text it serves then counts each as it happened.
Needs the ``metrics`` extra (opentelemetry-exporter-prometheus, prometheus-client).
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_app import Boom, Flaky, Greet
from cli_support import worker_process

from stepstone import JobRunner
from stepstone.testing import wait_until, wait_until_sync

pytest.importorskip(
    "opentelemetry.exporter.prometheus",
    reason="serving metrics needs the metrics extra: pip install -e '.[metrics]'",
)
from prometheus_client.parser import text_string_to_metric_families

DEADLINE = 30.0

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def worker(store_dir: Path, cli_dir: Path, cli_env: dict[str, str]) -> Iterator[str]:
    """A worker serving metrics on a free port; yields its /metrics URL."""
    log_path = cli_dir / "worker.log"
    command = [
        *(sys.executable, "-m", "stepstone", "worker", "cli_app:make_runner"),
        *("--metrics-port", "0", "--metrics-host", "127.0.0.1", "--log-format", "json"),
    ]
    env = {**cli_env, "STEPSTONE_STORE": str(store_dir)}
    with log_path.open("w") as log_file, worker_process(command, env, log_file) as proc:
        yield _metrics_url(log_path, proc)


def _metrics_url(log_path: Path, proc: subprocess.Popen[bytes]) -> str:
    """The address the worker logged it serves metrics on (it chose the port),
    once it says it runs (and so drains on SIGTERM)."""

    def said() -> str | None:
        assert proc.poll() is None, log_path.read_text()
        messages = [json.loads(line)["message"] for line in log_path.read_text().splitlines()]
        running = any(message.startswith("worker running") for message in messages)
        for message in messages:
            found = re.search(r"metrics on (http://\S+)", message)
            if found and running:
                return found.group(1)
        return None

    wait_until_sync(said, timeout=DEADLINE, interval=0.02, message="where its metrics are")
    url = said()
    assert url is not None
    return url


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=DEADLINE) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name`` whose labels include ``labels``, summed; 0 if none."""
    return sum(
        v for (n, have), v in samples.items() if n == name and set(labels.items()) <= set(have)
    )


async def test_the_counts_a_worker_serves_match_the_jobs_it_ran(
    worker: str, store_dir: Path
) -> None:
    runner = JobRunner(str(store_dir))  # submits only: the worker is the other process
    try:
        greets = [await runner.submit(Greet(name=f"g{i}")) for i in range(3)]
        flaky = await runner.submit(Flaky(n=1))
        boom = await runner.submit(Boom(n=1))
        for handle in [*greets, flaky, boom]:
            await handle.join(timeout=DEADLINE)
    finally:
        await runner.close()

    # An outcome is recorded before its job is acked and counted, and an
    # attempt is counted before its job leaves what is in flight: wait for both.
    samples: Samples = {}

    async def settled() -> bool:
        nonlocal samples
        samples = await asyncio.to_thread(scrape, worker)
        counted = value(samples, "stepstone_job_duration_seconds_count") == 6
        return counted and value(samples, "stepstone_job_in_flight") == 0

    await wait_until(settled, timeout=DEADLINE, interval=0.05, message="the counts to settle")

    job = "stepstone_job_kind"
    assert value(samples, "stepstone_job_claimed_total", **{job: "cli.greet"}) == 3
    assert value(samples, "stepstone_job_claimed_total", **{job: "cli.flaky"}) == 2
    assert value(samples, "stepstone_job_claimed_total", **{job: "cli.boom"}) == 1
    assert value(samples, "stepstone_job_succeeded_total", **{job: "cli.greet"}) == 3
    assert value(samples, "stepstone_job_succeeded_total", **{job: "cli.flaky"}) == 1
    assert value(samples, "stepstone_job_succeeded_total", **{job: "cli.boom"}) == 0
    assert value(samples, "stepstone_job_retried_total") == 1
    assert value(samples, "stepstone_job_retried_total", **{job: "cli.flaky"}) == 1
    assert value(samples, "stepstone_job_failed_total", error_type="RuntimeError") == 1
    permanent = "stepstone.runtime.errors.Permanent"
    assert value(samples, "stepstone_job_failed_total", error_type=permanent) == 1
    assert value(samples, "stepstone_job_dead_total", **{job: "cli.boom"}) == 1
    assert value(samples, "stepstone_job_dead_total") == 1
    assert value(samples, "stepstone_job_start_latency_seconds_count") == 5
    # Greet runs two steps, Boom one; Flaky none.
    assert value(samples, "stepstone_step_duration_seconds_count", **{job: "cli.greet"}) == 6
    assert value(samples, "stepstone_step_duration_seconds_count", **{job: "cli.boom"}) == 1
    succeeded = {"stepstone_job_result": "succeeded"}
    assert value(samples, "stepstone_job_duration_seconds_count", **succeeded) == 4
    assert value(samples, "stepstone_job_in_flight") == 0
    assert value(samples, "stepstone_queue_depth", stepstone_job_status="dead") == 1
    assert value(samples, "stepstone_queue_depth", stepstone_job_status="ready") == 0


@pytest.mark.parametrize("path", ["/", "/anything", "/metrics/x", "/favicon.ico"])
def test_only_the_metrics_path_serves_the_metrics(worker: str, path: str) -> None:
    """Any other path is a 404, not the metrics page under another name."""
    url = worker.removesuffix("/metrics") + path
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=DEADLINE)
    assert refused.value.code == 404
    assert scrape(worker + "?name[]=stepstone_job_in_flight") is not None
