"""Error texts sealed as they are written, when a runner is told to
(``JobRunner(seal_errors=True)``), and opened as they are read.

An error's text (its message, its traceback, a queue record's last error)
often holds what the job was given: a card number, an address. Sealed, it
is a **sealed text**: the payload codecs' sealed payload
(:mod:`stepstone.records.payloads`) of the text's UTF-8, in base64,
between ``[sealed:`` and ``]``. It is a string like any error text, so the
records that hold one (outcome, attempt, and queue records, an SQS
message) keep their format; it may be a whole field or part of one (a
dead job's reason keeps its kind readable: ``exhausted: [sealed:...]``).

A reader opens every sealed text a field holds (:func:`open_text`), and
shows ``<encrypted (key k1)>`` in its place when it does not hold the key:
it never fails for it. A field without one (written before sealing was
on, or by the engine's own words) reads as it is, at the cost of a search
for ``[sealed:``.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re

from stepstone.errors import PayloadUnreadable
from stepstone.records.payloads import Payloads, sealed
from stepstone.runtime.queue import JobRecord

OPENING = "[sealed:"
"""How a sealed text starts (no exception's name does: none starts with ``[``)."""
_SEALED = re.compile(r"\[sealed:([A-Za-z0-9+/]*={0,2})\]")


class ErrorSealing:
    """Whether a runner seals the error texts it writes (:attr:`on`), and
    with what: its payload codecs (``payloads``, which it shares)."""

    def __init__(self, payloads: Payloads, *, on: bool = False) -> None:
        self.payloads = payloads
        self.on = on

    def seal(self, text: str) -> str:
        """``text`` sealed (whatever :attr:`on` says: its callers ask it).

        Never raises: the engine calls it while it records how a run
        failed. A codec that fails leaves a note in the text's place, never
        the text."""
        try:
            data = self.payloads.seal_bytes(text.encode("utf-8", "backslashreplace"))
        except Exception as exc:
            return f"<the error text was not sealed: a codec raised {type(exc).__name__}>"
        return f"{OPENING}{base64.b64encode(data).decode('ascii')}]"

    def seal_optional(self, text: str | None) -> str | None:
        """:meth:`seal` of a text that may be absent (None stays None)."""
        return None if text is None else self.seal(text)


def open_text(payloads: Payloads, text: str) -> str:
    """``text`` with every sealed text in it opened; ``<encrypted (key k1)>``
    (what sealed it) in the place of one that does not open here. Never
    raises. What only looks like a sealed text is left as it is."""
    if OPENING not in text:
        return text
    return _SEALED.sub(lambda found: _opened(payloads, found), text)


def open_optional(payloads: Payloads, text: str | None) -> str | None:
    """:func:`open_text` of a text that may be absent."""
    return None if text is None else open_text(payloads, text)


def _opened(payloads: Payloads, found: re.Match[str]) -> str:
    try:
        data = base64.b64decode(found[1], validate=True)
    except (binascii.Error, ValueError):
        return found[0]
    if not sealed(data):
        return found[0]  # (a user's text that looks like one)
    try:
        return payloads.open_bytes(data).decode("utf-8", "replace")
    except PayloadUnreadable as exc:
        return exc.shown()


def opened_job(payloads: Payloads, record: JobRecord) -> JobRecord:
    """A queue record with its last error and dead reason opened."""
    last_error = open_optional(payloads, record.last_error)
    dead_reason = open_optional(payloads, record.dead_reason)
    if last_error is record.last_error and dead_reason is record.dead_reason:
        return record
    return dataclasses.replace(record, last_error=last_error, dead_reason=dead_reason)
