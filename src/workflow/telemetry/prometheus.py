"""Serve stepstone's metrics in the Prometheus text format over HTTP.

What ``stepstone worker --metrics-port N`` does, and what an application
that runs its own runner can call: OpenTelemetry's Prometheus reader on a
MeterProvider of its own, given to :func:`stepstone.telemetry.metrics.use_meter_provider`,
and prometheus_client's HTTP server (a daemon thread) answering
``GET /metrics``. Needs the ``metrics`` extra (opentelemetry-exporter-prometheus
and prometheus-client).

Names follow the exporter's translation of OpenTelemetry's: dots become
underscores, a counter ends in ``_total``, a unit of seconds adds
``_seconds`` (``stepstone.job.duration`` is ``stepstone_job_duration_seconds``).
"""

from __future__ import annotations

import threading

from stepstone.telemetry.metrics import meter_provider, use_meter_provider

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
            from prometheus_client import start_http_server
        except ImportError as exc:
            raise MetricsUnavailable(
                f"serving metrics needs the metrics extra: pip install 'stepstone[metrics]' ({exc})"
            ) from exc
        provider = meter_provider(PrometheusMetricReader())
        server, _thread = start_http_server(port, addr=host)
        use_meter_provider(provider)
        bound_host, bound_port = server.server_address[:2]
        _served = (str(bound_host), int(bound_port))
        return _served
