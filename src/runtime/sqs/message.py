"""The body of every message the SqsQueue sends, and its codec.

A job travels as one compact JSON object: SQS carries text, and the same
object, payload included, is the job's marker in the id store. The keys are
short and fixed; messages already in a queue are read by every later version,
so a change here is a change of wire format:

=========  ==================  ================================================
key        field               what
=========  ==================  ================================================
``v``      (format)            always 1; a reader refuses others
``id``     ``id``              the job id
``kind``   ``kind``            the handler's kind
``prio``   ``priority``        0 (first) to 9 (last)
``max``    ``max_attempts``    counted attempts before the job dies
``run_at`` ``run_at``          when it is due (the queue's clock)
``enq``    ``enqueued_at``     when it was enqueued
``a``      ``attempts``        attempts counted before this message's receives
``c``      ``claims``          claims made before this message's receives
``l``      ``lapses``          lapsed leases taken over before this message
``h``      ``headers``         str to str
``p``      ``payload``         base64; left out of a spilled job's message
``tok``    ``token``           this enqueue's marker token (id store only)
``sp``     ``spilled``         1: the payload is in the marker only
``err``    ``last_error``      the last counted failure
``dead``   ``dead_reason``     why it was dead-lettered
``died``   ``died_at``         when
=========  ==================  ================================================

Every settlement but an ack re-sends the job as a new message, so a message
is received again only when the lease of its last receive lapsed (its
worker died or hung): SQS counts every receive itself
(ApproximateReceiveCount), so a delivery's attempt is ``a`` plus one and
its lapses ``l`` plus the receives before it (docs/scaling.md). A message
is re-sent with ``a`` as it must stand: the attempt spent, or handed back.

A message that is not a job's (sent by something else, or garbled) is set
aside in the dead-letter queue wrapped as a :class:`ForeignMessage`, which
:func:`decode` refuses like any other body that is not a job.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import plausible
from ..errors import QueueError
from ..run_id import check_storable_id

__all__ = ["FORMAT", "ForeignMessage", "JobMessage", "MalformedMessage", "decode", "encode"]

FORMAT = 1
"""The ``v`` of every message; bumped only by an incompatible change."""


class MalformedMessage(QueueError):
    """A message body or id-store marker is not a job message this queue wrote;
    the text says what is wrong with it."""


@dataclass(frozen=True, slots=True)
class JobMessage:
    """One job as its SQS message (and its id-store marker) carries it."""

    id: str
    kind: str
    priority: int
    max_attempts: int
    run_at: float
    enqueued_at: float
    attempts: int
    """Counted attempts before this message's receives: a delivery's attempt
    is this plus one."""
    claims: int
    """Claims before this message's receives, counted or not."""
    headers: Mapping[str, str]
    payload: bytes | None
    """None only in a spilled job's message: its payload is in the marker."""
    token: str | None = None
    """Names this enqueue in the id store's marker; None without an id store."""
    spilled: bool = False
    last_error: str | None = None
    dead_reason: str | None = None
    """Set once the job is dead-lettered."""
    died_at: float | None = None
    lapses: int = 0
    """Leases that lapsed before this message's receives: a delivery's lapses
    are this plus SQS's ApproximateReceiveCount less one."""


@dataclass(frozen=True, slots=True)
class ForeignMessage:
    """A message that is not a job's, as it is set aside in the dead-letter queue."""

    id: str
    """SQS's MessageId: a foreign message has no job id."""
    body: str
    """The message's text as it came."""
    reason: str
    receives: int


def encode(message: JobMessage | ForeignMessage) -> str:
    """The message's body text: compact JSON, keys in the order of the table above."""
    body: dict[str, Any]
    if isinstance(message, ForeignMessage):
        body = {"v": FORMAT, "id": message.id, "foreign": message.body}
        body.update(dead=message.reason, a=0, c=message.receives)
        return _dumps(body)
    body = {
        "v": FORMAT,
        "id": message.id,
        "kind": message.kind,
        "prio": message.priority,
        "max": message.max_attempts,
        "run_at": message.run_at,
        "enq": message.enqueued_at,
        "a": message.attempts,
        "c": message.claims,
        "h": dict(message.headers),
    }
    if message.payload is not None:
        body["p"] = base64.b64encode(message.payload).decode("ascii")
    optional = {
        "tok": message.token,
        "sp": 1 if message.spilled else None,
        "err": message.last_error,
        "dead": message.dead_reason,
        "died": message.died_at,
        "l": message.lapses or None,
    }
    body.update((key, value) for key, value in optional.items() if value is not None)
    return _dumps(body)


def _dumps(body: dict[str, Any]) -> str:
    return json.dumps(body, separators=(",", ":"))


def decode(text: str | bytes) -> JobMessage:
    """Read a job message, checking every field; anything else raises
    MalformedMessage naming what is wrong. Keys it does not know are ignored."""
    try:
        body = json.loads(text)
    except ValueError as exc:  # bad JSON, or bytes that are not UTF-8
        raise MalformedMessage(f"not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise MalformedMessage(f"expected a JSON object, found {_json_type(body)}")
    if "foreign" in body:
        raise MalformedMessage("a foreign message set aside in the dead-letter queue, not a job")
    if "v" not in body:
        raise MalformedMessage("field 'v' (format) is missing")
    if type(body["v"]) is not int or body["v"] != FORMAT:
        raise MalformedMessage(f"unknown message format {body['v']!r}")
    fields = _Fields(body)
    run_id = fields.text("id", "id")
    try:
        check_storable_id(run_id)
    except ValueError as exc:
        raise MalformedMessage(f"field 'id': {exc}") from exc
    spilled = fields.spilled()
    payload = fields.payload(required=not spilled)
    return JobMessage(
        id=run_id,
        kind=fields.text("kind", "kind"),
        priority=fields.integer("prio", "priority", lowest=0, highest=9),
        max_attempts=fields.integer("max", "max_attempts", lowest=1),
        run_at=fields.number("run_at", "run_at", due=True),
        enqueued_at=fields.number("enq", "enqueued_at"),
        attempts=fields.integer("a", "attempts", lowest=0),
        claims=fields.integer("c", "claims", lowest=0),
        headers=fields.headers(),
        payload=payload,
        token=fields.optional_text("tok", "token"),
        spilled=spilled,
        last_error=fields.optional_text("err", "last_error"),
        dead_reason=fields.optional_text("dead", "dead_reason"),
        died_at=fields.optional_number("died", "died_at"),
        lapses=fields.integer("l", "lapses", lowest=0) if "l" in body else 0,
    )


def _json_type(value: object) -> str:
    """What ``value`` was in the JSON text, for an error message."""
    if value is None:
        return "null"
    names = {bool: "a boolean", int: "an integer", float: "a fraction", str: "a string"}
    return names.get(type(value)) or ("an array" if isinstance(value, list) else "an object")


@dataclass(slots=True)
class _Fields:
    """Typed reads from a decoded body, each error naming the key and its field."""

    body: dict[str, Any]

    def _get(self, key: str, name: str, types: tuple[type, ...], kind: str) -> Any:
        if key not in self.body:
            raise MalformedMessage(f"field {key!r} ({name}) is missing")
        value = self.body[key]
        # bool is an int in Python: refuse it where a number is meant.
        if not isinstance(value, types) or isinstance(value, bool):
            raise MalformedMessage(
                f"field {key!r} ({name}) is {_json_type(value)}, expected {kind}"
            )
        return value

    def text(self, key: str, name: str) -> str:
        value: str = self._get(key, name, (str,), "a string")
        return value

    def optional_text(self, key: str, name: str) -> str | None:
        return self.text(key, name) if key in self.body else None

    def integer(
        self, key: str, name: str, *, lowest: int, highest: int = plausible.MAX_COUNT
    ) -> int:
        """A whole number from ``lowest`` to ``highest`` (by default the
        largest count a record may hold: :mod:`stepstone.runtime.plausible`)."""
        value: int = self._get(key, name, (int,), "an integer")
        if not lowest <= value <= highest:
            raise MalformedMessage(
                f"field {key!r} ({name}) is {value}, expected {lowest} to {highest}"
            )
        return value

    def number(self, key: str, name: str, *, due: bool = False) -> float:
        """A time that could be real (:mod:`stepstone.runtime.plausible`):
        within a century of now, or, for a run-at (``due``), up to the end of 9999."""
        value: float = self._get(key, name, (int, float), "a number")
        if isinstance(value, float) and not math.isfinite(value):
            raise MalformedMessage(f"field {key!r} ({name}) is {value}, expected a finite number")
        try:
            plausible.due(value, name) if due else plausible.time(value, name)
        except plausible.Implausible as exc:
            raise MalformedMessage(f"field {key!r} ({name}): {exc}") from exc
        return value  # (as it came: a message re-sent reads the same bytes)

    def optional_number(self, key: str, name: str) -> float | None:
        return self.number(key, name) if key in self.body else None

    def headers(self) -> dict[str, str]:
        value: dict[Any, Any] = self._get("h", "headers", (dict,), "an object")
        if not all(isinstance(v, str) for v in value.values()):
            raise MalformedMessage("field 'h' (headers) must map strings to strings")
        return value

    def spilled(self) -> bool:
        if "sp" not in self.body:
            return False
        if type(self.body["sp"]) is not int or self.body["sp"] != 1:
            raise MalformedMessage(f"field 'sp' (spilled) is {self.body['sp']!r}, expected 1")
        return True

    def payload(self, *, required: bool) -> bytes | None:
        if "p" not in self.body and not required:
            return None
        text = self.text("p", "payload")
        try:
            return base64.b64decode(text, validate=True)
        except binascii.Error as exc:
            raise MalformedMessage(f"field 'p' (payload) is not base64: {exc}") from exc
