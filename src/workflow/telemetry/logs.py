"""Logs that say which run they are about.

The engine's records carry ``run_id``, ``kind`` and ``attempt`` as record
attributes. While a run's handler runs, the same three are also held in a
context variable (set by :func:`stepstone.telemetry.tracing.job_scope`), so
:class:`JobLogFilter` can stamp them onto *any* record logged inside the
run, the application's own included, without the job passing them around.
Install the filter on a handler (``configure_logging`` does, and ``stepstone
worker`` calls that); a logger's own filters do not see records propagated
from child loggers, a handler's do.
"""

from __future__ import annotations

import contextvars
import json
import logging
from dataclasses import dataclass
from typing import Any

from stepstone.telemetry.escaping import escape_controls

JOB_FIELDS = ("run_id", "kind", "attempt")


@dataclass(frozen=True, slots=True)
class JobLogContext:
    """The run whose handler runs in this context."""

    run_id: str
    kind: str
    attempt: int


_current: contextvars.ContextVar[JobLogContext | None] = contextvars.ContextVar(
    "stepstone_job", default=None
)


def current_job() -> JobLogContext | None:
    """The run whose handler is running in this task (or thread it started), if any."""
    return _current.get()


def entering(context: JobLogContext) -> contextvars.Token[JobLogContext | None]:
    """Make ``context`` the current run's; ``leaving(token)`` undoes it."""
    return _current.set(context)


def leaving(token: contextvars.Token[JobLogContext | None]) -> None:
    _current.reset(token)


class JobLogFilter(logging.Filter):
    """Gives every record ``run_id``, ``kind`` and ``attempt`` attributes.

    From the record's own ``extra`` when the engine passed them, else from
    the run whose handler runs in the current context, else None, so a format
    string like ``%(run_id)s`` never fails. Never drops a record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        job = _current.get()
        if getattr(record, "run_id", None) is None:
            record.run_id = job.run_id if job is not None else None
            if job is not None:
                record.kind = getattr(record, "kind", None) or job.kind
                if getattr(record, "attempt", None) is None:
                    record.attempt = job.attempt
        for name in JOB_FIELDS:
            if not hasattr(record, name):
                setattr(record, name, None)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the job fields, and
    the traceback when there is one. For log pipelines that index fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": record.created,
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in JOB_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                doc[name] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


class TextFormatter(logging.Formatter):
    """:data:`TEXT_FORMAT` lines, with control characters escaped
    (:func:`stepstone.telemetry.escaping.escape_controls`): a job's error message cannot
    move the cursor, clear the terminal or start a forged line. A record is
    one line; only a traceback below it keeps its line breaks."""

    def __init__(self, fmt: str = TEXT_FORMAT) -> None:
        super().__init__(fmt)

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_controls(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        # A traceback ends with each error's message, a job's text: its line
        # breaks are escaped too, so it cannot start a line of its own.
        text = super().formatException(ei)
        for error in _chain(ei[1]):
            for job_text in (_text_of(error), *getattr(error, "__notes__", ())):
                if isinstance(job_text, str) and job_text and "\n" in job_text:
                    text = text.replace(job_text, escape_controls(job_text))
        return text

    def format(self, record: logging.LogRecord) -> str:
        # The traceback too, formatted here: another handler's formatter may
        # have cached its own in the record, job text unescaped.
        cached = record.exc_text
        if record.exc_info:
            record.exc_text = None
        try:
            return escape_controls(super().format(record), newlines=True)
        finally:
            record.exc_text = cached


def _chain(error: BaseException | None) -> list[BaseException]:
    """``error`` and the errors a traceback prints with it (causes, contexts)."""
    chain: list[BaseException] = []
    while error is not None and all(error is not seen for seen in chain):
        chain.append(error)
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    return chain


def _text_of(error: BaseException) -> str | None:
    try:
        return str(error)
    except Exception:
        return None


def configure_logging(level: str | int = "INFO", *, json_lines: bool = False) -> logging.Handler:
    """A stderr handler on the root logger with :class:`JobLogFilter`, text
    (:class:`TextFormatter`) or JSON lines.

    Returns the handler so a caller can remove it again.
    """
    handler = logging.StreamHandler()
    handler.addFilter(JobLogFilter())
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    return handler
