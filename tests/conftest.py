"""Shared fixtures: a real S3 (moto's server on a local port) and one store of each kind.

Names here are used across the suite (store, runtime, workflow); keep them.

moto's server answers on a thread pool and checks a conditional write's
precondition and applies it in two steps, so in principle two racing
conditional PUTs could both pass; real S3 applies them atomically. The server
here therefore takes a lock around object writes (PUT and DELETE), which makes
moto hold S3's guarantee by construction rather than by the GIL's luck,
without serialising reads or SQS (whose long polls would block).
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from store import FileStore, MemoryStore, ObjectStore

FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


class _WriteLock:
    """WSGI middleware: one object write at a time, as S3 applies conditional writes."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("REQUEST_METHOD") not in ("PUT", "DELETE"):
            return self.app(environ, start_response)
        with self.lock:
            # Drain the response inside the lock: moto does its work lazily
            # for some responses.
            return list(self.app(environ, start_response))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """moto's S3/SQS server on a free local port for the whole session; yields its URL."""
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    class Server(ThreadedMotoServer):
        def _server_entry(self) -> None:
            app = _WriteLock(DomainDispatcherApplication(create_backend_app))
            self._server = make_server(
                self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
            )
            self._server_ready_event.set()
            self._server.serve_forever()

    saved = {name: os.environ.get(name) for name in FAKE_AWS_ENV}
    os.environ.update(FAKE_AWS_ENV)
    server = Server(ip_address="127.0.0.1", port=_free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def s3_admin(moto_server: str) -> Any:
    """A synchronous boto3 S3 client on the moto server, for setting up and inspecting."""
    import boto3

    return boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")


@pytest.fixture
def s3_bucket(s3_admin: Any) -> str:
    """A fresh, uniquely named, empty bucket on the moto server."""
    name = f"stepstone-test-{uuid.uuid4().hex[:16]}"
    s3_admin.create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_url(moto_server: str, s3_bucket: str) -> str:
    return f"s3://{s3_bucket}/t?endpoint_url={moto_server}&region=us-east-1"


@pytest.fixture
def memory_store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
async def file_store(tmp_path: Path) -> AsyncIterator[FileStore]:
    store = FileStore(tmp_path / "store")
    yield store
    await store.close()


@pytest.fixture
async def s3_store(s3_url: str) -> AsyncIterator[ObjectStore]:
    from store import open_store

    store = open_store(s3_url)
    yield store
    await store.close()


@pytest.fixture(params=["memory", "file", "s3"], ids=["memory", "file", "s3"])
def any_store(request: pytest.FixtureRequest) -> ObjectStore:
    """The same test against every backend."""
    store: ObjectStore = request.getfixturevalue(f"{request.param}_store")
    return store
