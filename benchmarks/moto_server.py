"""moto's S3 server in a child process, so its request handling does not
share the benchmark's GIL. Object writes (PUT, DELETE) are serialised, as in
the test kit's server (workflow.testing.moto_server), so moto applies a
conditional write atomically, like S3. ``latency=(low, high)`` answers each
request after a round trip drawn from that range (seeded), as the simulated
fleet's SQS (benchmarks/fleet.py).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import random
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

from stepstone.testing import FAKE_AWS_ENV, WriteLock
from stepstone.testing.moto import free_port


class Latency:
    """WSGI middleware: each request waits a round trip drawn from ``latency``."""

    def __init__(
        self, app: Callable[..., Iterable[bytes]], latency: tuple[float, float], seed: int
    ) -> None:
        self.app = app
        self.latency = latency
        self.rng = random.Random(seed)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        time.sleep(self.rng.uniform(*self.latency))  # this request's thread only
        return self.app(environ, start_response)


def _serve(port: int, latency: tuple[float, float] | None, seed: int) -> None:
    os.environ.update(FAKE_AWS_ENV)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    app: Callable[..., Iterable[bytes]] = WriteLock(DomainDispatcherApplication(create_backend_app))
    if latency is not None:
        app = Latency(app, latency, seed)
    server = make_server("127.0.0.1", port, app, True, request_handler=MotoRequestHandler)
    server.serve_forever()


class MotoServer:
    """``with MotoServer() as url:`` a fresh moto S3 on a local port."""

    def __init__(self, latency: tuple[float, float] | None = None, seed: int = 0) -> None:
        self.latency = latency
        self.seed = seed
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: multiprocessing.process.BaseProcess | None = None

    def __enter__(self) -> str:
        os.environ.update(FAKE_AWS_ENV)
        ctx = multiprocessing.get_context("spawn")
        self._process = ctx.Process(
            target=_serve, args=(self.port, self.latency, self.seed), daemon=True
        )
        self._process.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self.url
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("moto server did not start")

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.join(5)

    def create_bucket(self, name: str) -> None:
        import boto3

        boto3.client("s3", endpoint_url=self.url, region_name="us-east-1").create_bucket(
            Bucket=name
        )
