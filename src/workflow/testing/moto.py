"""moto's S3 and SQS server for tests, made to apply writes as S3 and SQS
do (:class:`WriteLock`): what the ``stepstone_moto_server`` fixture runs,
and what benchmarks start in a process of their own.

moto, boto3 and werkzeug are imported inside :func:`moto_server`, so
importing this module costs nothing a project's tests do not use.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}
"""Credentials and a region for moto, set by the S3 fixtures: no real AWS
account is read or reached."""


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """Run moto's S3 and SQS server on a free local port; yields its endpoint URL.

    Sets fake AWS credentials in the environment while it runs (and restores
    the old ones after), so no test can reach a real account. The server
    applies object writes and changes to SQS's messages one at a time, as S3
    and SQS do, where moto alone can interleave them (:class:`WriteLock`).
    """
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    class _Server(ThreadedMotoServer):
        def _server_entry(self) -> None:
            app = WriteLock(DomainDispatcherApplication(create_backend_app))
            self._server = make_server(
                self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
            )
            self._server_ready_event.set()
            self._server.serve_forever()

    saved = {name: os.environ.get(name) for name in FAKE_AWS_ENV}
    os.environ.update(FAKE_AWS_ENV)
    server = _Server(ip_address="127.0.0.1", port=free_port(), verbose=False)
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


_SQS_ARRIVALS = frozenset(
    f"AmazonSQS.{action}"
    for action in (
        "SendMessage",
        "SendMessageBatch",
        "ChangeMessageVisibility",
        "ChangeMessageVisibilityBatch",
    )
)
"""The SQS changes that can make a message visible: a waiting long poll looks again."""
_SQS_CHANGES = _SQS_ARRIVALS | {
    f"AmazonSQS.{action}" for action in ("DeleteMessage", "DeleteMessageBatch", "PurgeQueue")
}
_SQS_RECEIVE = "AmazonSQS.ReceiveMessage"


class WriteLock:
    """WSGI middleware for moto's server: one object write at a time, as S3
    applies conditional writes, and one change to SQS's messages at a time,
    as SQS applies them.

    moto checks a conditional write's precondition and applies it in two
    steps, and keeps an SQS queue's messages in a list its server's threads
    change without a lock: two deletes at once brought a deleted message
    back, and two receives at once both took one message. Here a receive
    takes its messages under the lock too, and a long poll is served as
    receives that answer at once, again on each send and at least every
    0.2 s, until one brings messages or its ``WaitTimeSeconds`` are over: no
    request holds the lock while it waits. (SQS requests in the JSON
    protocol, which botocore sends; a receive that names no wait time is
    passed on as it is.)
    """

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.lock = threading.Lock()
        self._sqs = threading.Condition()
        """Held by each SQS change and receive; notified by each that can
        make a message visible."""

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        """Serve one WSGI request: writes and SQS changes one at a time, reads alongside."""
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target == _SQS_RECEIVE:
            return self._receive(environ, start_response)
        if target in _SQS_CHANGES:
            with self._sqs:
                served = list(self.app(environ, start_response))
                if target in _SQS_ARRIVALS:
                    self._sqs.notify_all()
            return served
        if environ.get("REQUEST_METHOD") not in ("PUT", "DELETE"):
            return self.app(environ, start_response)
        with self.lock:
            return list(self.app(environ, start_response))

    def _receive(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        request = json.loads(body or b"{}")
        wait = request.get("WaitTimeSeconds")
        if wait is None:  # the queue's own setting: moto waits as it does
            return self.app(_with_body(environ, body), start_response)
        deadline = time.monotonic()
        if isinstance(wait, int) and 0 <= wait <= 20:  # (moto answers others with an error)
            deadline += wait
            body = json.dumps({**request, "WaitTimeSeconds": 0}).encode()
        while True:
            with self._sqs:
                status, headers, served = _serve(self.app, _with_body(environ, body))
                left = deadline - time.monotonic()
                if left <= 0 or not status.startswith("200") or json.loads(served).get("Messages"):
                    break
                # Woken by a send; a message whose visibility or delay ends
                # comes back on its own, so look again soon regardless.
                self._sqs.wait(min(left, 0.2))
        start_response(status, headers)
        return [served]


def _with_body(environ: dict[str, Any], body: bytes) -> dict[str, Any]:
    return dict(environ, **{"wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body))})


def _serve(
    app: Callable[..., Iterable[bytes]], environ: dict[str, Any]
) -> tuple[str, list[tuple[str, str]], bytes]:
    """Call ``app`` for one request: its status, headers and body."""
    answer: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        answer[:] = [status, headers]
        return lambda data: None

    served = app(environ, start_response)
    try:
        body = b"".join(served)
    finally:
        close = getattr(served, "close", None)
        if close is not None:
            close()
    return answer[0], answer[1], body


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
