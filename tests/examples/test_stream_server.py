"""examples/stream_server.py served by uvicorn and used from a real headless
browser: a question asked on the page is answered token by token, as
server-sent events from the run's stream; a client that reconnects with
``Last-Event-ID`` goes on from the next item; a process that never held the
run's handle serves its stream."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the example needs the examples extra")
pytest.importorskip("uvicorn", reason="the example is served by uvicorn (the ui extra)")

REPO = Path(__file__).parents[2]
sys.path.insert(0, str(REPO / "examples"))

from stream_server import think  # noqa: E402

from stepstone.testing import wait_until_sync  # noqa: E402

DEADLINE = 30.0


def serve(store: Path, *, run_worker: bool) -> Iterator[str]:
    """``uvicorn stream_server:app`` on a socket bound here (no port race);
    yields its base URL until the block ends."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    env = {
        **os.environ,
        "STEPSTONE_STORE": str(store),
        "RUN_WORKER": "1" if run_worker else "0",
        "PYTHONPATH": os.pathsep.join([str(REPO / "examples"), *sys.path]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "stream_server:app", "--fd", str(sock.fileno())],
        env=env,
        pass_fds=[sock.fileno()],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    sock.close()
    base = f"http://127.0.0.1:{port}"
    try:

        def serving() -> bool:
            assert proc.poll() is None, f"the app exited: {proc.stderr}"
            try:
                return httpx.get(base + "/").status_code == 200
            except httpx.TransportError:
                return False

        wait_until_sync(serving, timeout=DEADLINE, interval=0.05, message="the app to start")
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=DEADLINE)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "answers"
    path.mkdir()
    return path


@pytest.fixture
def app(store: Path) -> Iterator[str]:
    yield from serve(store, run_worker=True)


def expected(question: str) -> list[str]:
    return asyncio.run(think(question))


def test_the_page_shows_the_answer_token_by_token(app: str, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(app + "/")
    browser.find_element(By.ID, "question").send_keys("why is the sky blue")
    browser.find_element(By.CSS_SELECTOR, "#ask button").click()
    tokens = expected("why is the sky blue")
    seen = set()

    def done() -> bool:
        seen.add(browser.execute_script("return window.received"))
        status = browser.execute_script("return document.getElementById('status').textContent")
        return bool(status == "done")

    wait_until_sync(done, timeout=DEADLINE, interval=0.01, message="the answer to finish")
    answer = browser.execute_script("return document.getElementById('answer').textContent")
    assert answer == "".join(tokens)
    assert browser.execute_script("return window.received") == len(tokens), "a token twice"
    assert len(seen - {0, len(tokens)}) >= 2, f"the answer came all at once, not live: {seen}"


def test_a_reconnect_goes_on_from_the_last_event_and_any_process_serves_it(
    app: str, store: Path
) -> None:
    run_id = httpx.post(app + "/questions", json={"text": "tides"}).json()["run_id"]
    tokens = expected("tides")
    events = sse(app, run_id)
    assert [e["data"] for e in events if e.get("event") != "end"] == tokens
    assert [e["id"] for e in events if "id" in e] == [str(n) for n in range(len(tokens))]
    assert events[-1]["event"] == "end"

    # A browser that lost the connection after the third event sends its id.
    resumed = sse(app, run_id, last_event_id="2")
    assert [e["data"] for e in resumed if e.get("event") != "end"] == tokens[3:]

    # Another API process, with no worker, that never saw the run.
    for other in serve(store, run_worker=False):
        assert [e["data"] for e in sse(other, run_id) if e.get("event") != "end"] == tokens
    assert httpx.get(f"{app}/runs/not-a-run/tokens").status_code == 404
    missing = sse(app, "0" * 32)
    assert [e["event"] for e in missing] == ["missing", "end"]


def sse(base: str, run_id: str, last_event_id: str | None = None) -> list[dict[str, Any]]:
    """The events of ``GET /runs/{run_id}/tokens`` until the stream ends."""
    headers = {} if last_event_id is None else {"Last-Event-ID": last_event_id}
    events: list[dict[str, Any]] = []
    with httpx.stream(
        "GET", f"{base}/runs/{run_id}/tokens", headers=headers, timeout=DEADLINE
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        event: dict[str, Any] = {}
        for line in response.iter_lines():
            if not line:
                events.append(event)
                event = {}
                continue
            field, _, value = line.partition(": ")
            event[field] = json.loads(value) if field == "data" else value
    return events
