"""Serve stepstone's metrics in the Prometheus text format over HTTP.

What ``stepstone worker --metrics-port N`` does, and what an application
that runs its own runner can call: OpenTelemetry's Prometheus reader on a
MeterProvider of its own, given to :func:`stepstone.telemetry.metrics.use_meter_provider`,
and an HTTP server (a daemon thread) answering ``GET /metrics`` with
prometheus_client's exposition, and 404 to any other path (prometheus_client's
own server answers every path with the metrics). Needs the ``metrics`` extra
(opentelemetry-exporter-prometheus and prometheus-client).

Names follow the exporter's translation of OpenTelemetry's: dots become
underscores, a counter ends in ``_total``, a unit of seconds adds
``_seconds`` (``stepstone.job.duration`` is ``stepstone_job_duration_seconds``).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any

from stepstone.telemetry.metrics import meter_provider, use_meter_provider

METRICS_PATH = "/metrics"

_served: tuple[str, int] | None = None
_lock = threading.Lock()


class MetricsUnavailable(RuntimeError):
    """The ``metrics`` extra is not installed."""


def serve_prometheus(port: int, host: str = "0.0.0.0") -> tuple[str, int]:
    """Serve ``/metrics`` on ``host:port`` (port 0: a free one) and record
    stepstone's metrics for it; returns the address bound. Start it before
    the runner: a runner picks up metrics when it starts.

    Once per process: prometheus_client's registry is the process's, and a
    second call returns the first address.
    """
    global _served
    with _lock:
        if _served is not None:
            return _served
        try:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from prometheus_client import make_wsgi_app
        except ImportError as exc:
            raise MetricsUnavailable(
                f"serving metrics needs the metrics extra: pip install 'stepstone[metrics]' ({exc})"
            ) from exc
        provider = meter_provider(PrometheusMetricReader())
        server = _serve(host, port, _only_metrics(make_wsgi_app()))
        use_meter_provider(provider)
        bound_host, bound_port = server.server_address[:2]
        _served = (str(bound_host), int(bound_port))
        return _served


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _only_metrics(metrics: WsgiApp) -> WsgiApp:
    """``metrics`` at ``/metrics``; 404 elsewhere."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == METRICS_PATH:
            return metrics(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: the metrics are at /metrics\n"]

    return app


def _serve(host: str, port: int, app: WsgiApp) -> Any:
    """A threading WSGI server for ``app`` on ``host:port`` (an IPv6 address
    too), serving from a daemon thread, quiet about each request."""
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    family, address = _family(host, port)

    class ThreadingServer(ThreadingMixIn, WSGIServer):
        daemon_threads = True
        address_family = family

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = make_server(address, port, app, ThreadingServer, handler_class=Quiet)
    threading.Thread(target=server.serve_forever, name="stepstone-metrics", daemon=True).start()
    return server


def _family(host: str, port: int) -> tuple[socket.AddressFamily, str]:
    family, _, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    return family, str(address[0])
