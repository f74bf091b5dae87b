"""submit_sync: a runner used from code without an event loop (plain threads,
a WSGI app as Flask and Django run it), while a worker elsewhere runs the jobs."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from wf_jobs import Adder, Counters, GatedKeyed, KeyedFailure

from stepstone import JobFailed, JobRunner, JobStatus

SYNC_THREAD = "stepstone-sync"


def sync_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == SYNC_THREAD and t.is_alive()]


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    path = tmp_path / "jobs"
    path.mkdir()
    return path


@pytest.fixture
async def worker(directory: Path) -> AsyncIterator[JobRunner]:
    """A worker process's runner, on this test's loop, running the jobs."""
    runner = JobRunner(str(directory), jobs=[Adder, KeyedFailure, GatedKeyed], poll_interval=0.02)
    runner.add_state(Counters())
    async with runner:
        yield runner
    await runner.close()


@pytest.fixture
def web(directory: Path) -> Iterator[JobRunner]:
    """A web process's runner: no worker, used only through blocking calls."""
    runner = JobRunner(str(directory))
    yield runner
    runner.close_sync()


async def test_plain_threads_submit_and_wait_for_results(worker: JobRunner, web: JobRunner) -> None:
    def one(i: int) -> tuple[int, bool]:
        handle = web.submit_sync(Adder(a=i, b=1000))
        return handle.result(timeout=20), handle.newly_submitted

    with ThreadPoolExecutor(8) as pool:
        results = await asyncio.get_running_loop().run_in_executor(
            None, lambda: list(pool.map(one, range(24)))
        )

    assert results == [(i + 1000, True) for i in range(24)]
    assert len(sync_threads()) == 1  # one private loop serves every thread


async def test_a_sync_handle_blocks_for_the_outcome_and_raises_as_awaiting_does(
    worker: JobRunner, web: JobRunner
) -> None:
    def fail() -> tuple[JobStatus, str]:
        handle = web.submit_sync(KeyedFailure(n=3))
        outcome = handle.join(timeout=20)
        with pytest.raises(JobFailed, match="refusing 3"):
            handle.result()
        again = web.handle_sync(handle.id, KeyedFailure)
        state = again.status()
        assert state is not None
        return outcome.status, state.status

    assert await asyncio.to_thread(fail) == (JobStatus.FAILED, JobStatus.FAILED)


async def test_result_with_a_timeout_raises_timeout_error_and_the_job_goes_on(
    worker: JobRunner, web: JobRunner
) -> None:
    counters = worker.state_of(Counters)

    def wait_briefly() -> str:
        handle = web.submit_sync(GatedKeyed(n=1))
        with pytest.raises(TimeoutError):
            handle.result(timeout=0.2)
        return handle.id

    job_id = await asyncio.to_thread(wait_briefly)
    counters.gate.set()
    assert await worker.handle(job_id, GatedKeyed).result(timeout=20) == 1


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


async def test_a_wsgi_app_submits_and_answers_from_its_request_threads(
    worker: JobRunner, web: JobRunner
) -> None:
    """The call path of a Flask or Django view: a WSGI callable on a server's
    request thread, no event loop anywhere in sight."""

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        a = int(environ["QUERY_STRING"].removeprefix("a="))
        handle = web.submit_sync(Adder(a=a, b=1))
        body = json.dumps({"id": handle.id, "sum": handle.result(timeout=20)}).encode()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]

    server = make_server(
        "127.0.0.1", 0, app, server_class=_ThreadingWSGIServer, handler_class=_Quiet
    )
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        port = server.server_address[1]

        def get(a: int) -> dict[str, Any]:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/?a={a}", timeout=30) as r:
                answer: dict[str, Any] = json.loads(r.read())
                return answer

        with ThreadPoolExecutor(6) as pool:
            answers = await asyncio.get_running_loop().run_in_executor(
                None, lambda: list(pool.map(get, range(12)))
            )
    finally:
        server.shutdown()
        server.server_close()
    assert [answer["sum"] for answer in answers] == [a + 1 for a in range(12)]
    assert len({answer["id"] for answer in answers}) == 12


async def test_with_the_worker_running_blocking_calls_run_on_its_loop(
    worker: JobRunner,
) -> None:
    """An ASGI server's sync views run in threads beside the loop the runner
    started on: their calls go to that loop, and no second loop is made."""
    handle = await asyncio.to_thread(worker.submit_sync, Adder(a=2, b=3))
    assert await asyncio.to_thread(handle.result, 20) == 5
    assert sync_threads() == []


async def test_a_blocking_call_inside_an_event_loop_is_refused(web: JobRunner) -> None:
    with pytest.raises(RuntimeError, match=r"await runner\.submit"):
        web.submit_sync(Adder(a=1, b=1))
    assert sync_threads() == []  # refused before anything ran


async def test_closing_the_runner_stops_its_private_loop(directory: Path) -> None:
    by_close_sync = JobRunner(str(directory))
    handle = await asyncio.to_thread(by_close_sync.submit_sync, Adder(a=1, b=1))
    assert len(sync_threads()) == 1
    await asyncio.to_thread(by_close_sync.close_sync)
    assert sync_threads() == []

    by_close = JobRunner(str(directory))
    again = await asyncio.to_thread(by_close.handle_sync, handle.id, Adder)
    assert await asyncio.to_thread(again.status) is not None
    assert len(sync_threads()) == 1
    await by_close.close()
    assert sync_threads() == []
