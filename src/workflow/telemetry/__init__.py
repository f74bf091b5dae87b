"""Telemetry: logs, traces and metrics that say which run they are about.

What an application uses is importable from here::

    from stepstone.telemetry import configure_logging, use_tracer_provider

- ``logs.py``: every record stamped with the run it is about
  (:class:`JobLogFilter`), text and JSON formatters, :func:`configure_logging`;
- ``tracing.py``: a span per attempt and per step on an OpenTelemetry
  tracer (:func:`use_tracer_provider`), and the scope an attempt runs in;
- ``metrics.py``: counters and histograms of claims, attempts and steps on
  an OpenTelemetry meter (:func:`use_meter_provider`);
- ``prometheus.py``: those metrics served in the Prometheus text format
  (:func:`serve_prometheus`);
- ``escaping.py``: job-provided text made safe to print to a terminal.
"""

from stepstone.telemetry.logs import (
    JobLogFilter,
    JsonFormatter,
    TextFormatter,
    configure_logging,
    current_job,
)
from stepstone.telemetry.metrics import meter_provider, metrics_enabled, use_meter_provider
from stepstone.telemetry.prometheus import MetricsUnavailable, serve_prometheus
from stepstone.telemetry.tracing import use_tracer_provider

__all__ = [
    "JobLogFilter",
    "JsonFormatter",
    "MetricsUnavailable",
    "TextFormatter",
    "configure_logging",
    "current_job",
    "meter_provider",
    "metrics_enabled",
    "serve_prometheus",
    "use_meter_provider",
    "use_tracer_provider",
]
