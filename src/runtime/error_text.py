"""Errors as text that is safe to keep: in a queue record, an outcome record, a log line.

A job's error is described as ``ExcType: text``, never raising (an error
whose ``__str__`` raises is described, not re-raised), and cut to a size a
record can hold; its traceback is kept by its end, the frames nearest the
error.
"""

from __future__ import annotations

import traceback

from .errors import Permanent

MAX_MESSAGE_CHARS = 4000
"""Error messages are cut to this length: they travel in queue records and
outcome records, and a handler that raises with a megabyte of text must not
make either of those too big to write."""
MAX_TRACEBACK_CHARS = 8000
"""A failed attempt's traceback is cut to its last this many characters (the
frames nearest the error) for the outcome record; the queue record's last
error takes what fits beside the message within MAX_MESSAGE_CHARS."""


def reported_error(error: BaseException) -> BaseException:
    """The error to report: a Permanent that only classifies another
    error (it has an ``original``, like the workflow layer's
    ClassifiedPermanent) is reported as the error it wraps."""
    original = getattr(error, "original", None)
    if isinstance(error, Permanent) and isinstance(original, BaseException):
        return original
    return error


def describe(error: BaseException) -> str:
    """``"ExcType: text"`` (or ``"ExcType"`` when the text is empty), truncated.

    Never raises: an exception whose ``__str__`` raises is described as
    ``"<unprintable ExcType>"``, because a failure report that itself crashes
    would leave the job settled by nobody.
    """
    name = type(error).__name__
    try:
        text = str(error)
    except Exception:
        return f"<unprintable {name}>"
    return truncate(f"{name}: {text}" if text else name)


def qualified_name(cls: type) -> str:
    """``module.QualName``, or just ``QualName`` for builtins."""
    module = getattr(cls, "__module__", None)
    qualname = getattr(cls, "__qualname__", cls.__name__)
    return qualname if module in (None, "builtins") else f"{module}.{qualname}"


def truncate(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    if len(text) <= limit:
        return text
    marker = "... [truncated]"
    return text[: limit - len(marker)] + marker


def format_traceback(error: BaseException) -> str | None:
    """Where ``error`` was raised, as Python prints it (its causes included),
    cut to its last MAX_TRACEBACK_CHARS characters; None without a traceback.
    Never raises, like :func:`describe`."""
    if error.__traceback__ is None:
        return None
    try:
        text = "".join(traceback.format_exception(error)).rstrip("\n")
    except Exception:
        return None
    return _tail(text, MAX_TRACEBACK_CHARS)


def with_traceback(message: str, traceback_text: str | None) -> str:
    """``message``, then as much of the traceback's end as fits beside it
    within MAX_MESSAGE_CHARS: the error text a queue record keeps."""
    room = MAX_MESSAGE_CHARS - len(message) - 1
    if not traceback_text or room < 200:  # not even a frame fits: the message alone
        return message
    return f"{message}\n{_tail(traceback_text, room)}"


def _tail(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    marker = "[... earlier frames cut]\n"
    return marker + text[len(text) - (limit - len(marker)) :]
