"""``stepstone worker`` and its store: a misconfigured worker exits, an outage is ridden out.

A worker that cannot use its store at start (no bucket, refused credentials,
a malformed URL, an endpoint nobody answers) exits at once with status 1 and
one line saying why, so a supervisor sees a failed start instead of a
process retrying for ever. A store that goes away after a good start is
retried, one log line per retry, backing off, and the worker carries on
when it returns.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import moto.settings
import pytest
from cli_app import Greet
from cli_support import DEADLINE, Result, wait_for
from outage_proxy import OutageProxy

from stepstone import JobRunner
from stepstone.testing import FAKE_AWS_ENV

WORKER = [sys.executable, "-m", "stepstone", "worker", "cli_app:make_runner"]


def start_worker(cli_env: dict[str, str], url: str) -> Result:
    """Run the worker on ``url`` until it exits (a deadline says it did not)."""
    done = subprocess.run(
        WORKER,
        env={**cli_env, **FAKE_AWS_ENV, "STEPSTONE_STORE": url},
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def refused_at_start(result: Result, *fragments: str) -> None:
    """Exit 1, no traceback, and one line besides INFO logs, naming the problem."""
    assert result.status == 1, result
    assert "Traceback" not in result.err, result.err
    lines = [line for line in result.err.splitlines() if not re.search(r" INFO +\S+: ", line)]
    assert len(lines) == 1, result.err
    assert lines[0].startswith("stepstone: error: the worker cannot use its store: "), lines
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture
def credentials_checked() -> Iterator[None]:
    """moto checks signatures, as S3 does: the test's made-up keys are refused."""
    saved = moto.settings.INITIAL_NO_AUTH_ACTION_COUNT
    moto.settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    yield
    moto.settings.INITIAL_NO_AUTH_ACTION_COUNT = saved


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_a_missing_bucket_ends_the_worker_at_start(
    moto_server: str, cli_env: dict[str, str]
) -> None:
    url = f"s3://no-such-bucket-here/x?endpoint_url={moto_server}&region=us-east-1"
    refused_at_start(start_worker(cli_env, url), "bucket 'no-such-bucket-here' does not exist")


@pytest.mark.slow
def test_refused_credentials_end_the_worker_at_start(
    moto_server: str, s3_url: str, cli_env: dict[str, str], credentials_checked: None
) -> None:
    refused_at_start(start_worker(cli_env, s3_url), "refused the credentials", "InvalidAccessKeyId")


def test_an_endpoint_nobody_answers_ends_the_worker_at_start(cli_env: dict[str, str]) -> None:
    url = f"s3://bucket/x?endpoint_url=http://127.0.0.1:{closed_port()}&region=us-east-1"
    refused_at_start(start_worker(cli_env, url), "cannot reach S3")


def test_a_malformed_url_ends_the_worker_at_start(cli_env: dict[str, str]) -> None:
    result = start_worker(cli_env, "s3:///no-bucket")
    assert result.status == 1 and "Traceback" not in result.err, result
    assert result.err.splitlines() == [
        line for line in result.err.splitlines() if line.startswith("stepstone: error: ")
    ]
    assert "no bucket" in result.err


@pytest.mark.slow
async def test_an_outage_after_a_good_start_is_retried_one_line_at_a_time(
    moto_server: str, s3_bucket: str, cli_dir: Path, cli_env: dict[str, str]
) -> None:
    target = urlsplit(moto_server)
    assert target.hostname is not None and target.port is not None
    proxy = OutageProxy(target.hostname, target.port)
    proxy.start()
    url = f"s3://{s3_bucket}/t?endpoint_url=http://127.0.0.1:{proxy.port}&region=us-east-1"
    log_path = cli_dir / "worker.log"

    def records() -> list[dict[str, Any]]:
        return [json.loads(line) for line in log_path.read_text().splitlines()]

    def failures() -> list[dict[str, Any]]:
        return [r for r in records() if "queue claim failed" in r["message"]]

    with log_path.open("w") as log_file:
        proc = subprocess.Popen(  # noqa: ASYNC220 - returns at once
            [*WORKER, "--log-format", "json"],
            env={**cli_env, **FAKE_AWS_ENV, "STEPSTONE_STORE": url},
            stdout=subprocess.DEVNULL,
            stderr=log_file,
        )
    try:
        wait_for(lambda: any("worker running" in r["message"] for r in records()), "the start")
        proxy.stop()
        wait_for(lambda: len(failures()) >= 4, "four failed claims in the outage")
        assert proc.poll() is None, "the worker left during the outage"
        proxy.start()
        submitter = JobRunner(url)  # submits only: the worker process runs the job
        handle = await submitter.submit(Greet(name="after the outage"))
        assert await handle.result(timeout=DEADLINE) == "hello after the outage"
        await submitter.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE) == 0
    finally:
        proxy.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    failed = failures()
    assert all("exc" not in r for r in records()), "a traceback in the log"
    assert all("StoreUnavailable: cannot reach S3" in r["message"] for r in failed), failed
    pauses = [float(re.findall(r"retrying in ([\d.]+)s", r["message"])[0]) for r in failed]
    assert pauses[:4] == sorted(pauses[:4]) and pauses[3] > pauses[0], pauses  # backing off


def test_a_connection_lost_in_a_task_nobody_awaits_is_one_line_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An HTTP client's own write task, dropped in an outage, fails with
    nobody to retrieve it (aiohttp's ``write_bytes``): the worker's loop
    logs one line for it, no traceback; other unretrieved errors are left
    to asyncio's handler, traceback and all."""
    import asyncio
    import gc
    import logging

    from stepstone.cli.worker import on_unretrieved

    async def fails(error: Exception) -> None:
        raise error

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(on_unretrieved)
        for error in (ConnectionResetError("Cannot write to closing transport"), KeyError("x")):
            task = asyncio.ensure_future(fails(error))
            await asyncio.sleep(0)
            assert task.done()
            del task
            gc.collect()  # (the never-retrieved report comes when the task is collected)

    with caplog.at_level(logging.WARNING):
        asyncio.run(main())
    lost = [r for r in caplog.records if "connection was lost" in r.getMessage()]
    assert len(lost) == 1 and lost[0].exc_info is None, caplog.records
    assert "ConnectionResetError: Cannot write to closing transport" in lost[0].getMessage()
    other = [r for r in caplog.records if "never retrieved" in r.getMessage()]
    assert len(other) == 1 and other[0].exc_info is not None
