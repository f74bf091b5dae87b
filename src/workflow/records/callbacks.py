"""A callback's records: its id, where its completion lands, what its wait took.

A callback is a call of its run's history (``callback``,
:mod:`stepstone.execute.callbacks`): its memo, at its place, records when it
expires. Its **id** names the run, the incarnation and that place,
``<run_id>-<incarnation>-<token>`` (the token is the place's key segment
without its ``#``: ``00000003`` for the root's third call, ``b2.1-00000003``
in a branch), so whoever holds it needs nothing else to complete it, and a
replay of the run, which makes the call at the same place, has the same id.

A **completion** is one object, ``callbacks/<run_id>/<incarnation>/<token>``,
whose body is the value as JSON: put create-if-absent by
``runner.complete_callback``, or by whoever holds the callback's presigned
URL (a plain PUT: S3 keeps the last of several).

What the run's wait **took** is one record, created once (first writer
wins), at ``memos/<run_id>/<incarnation>/!callback@<token>``, outside the
run's positions: the completion's body and etag, or that the callback
expired, or that the body was too large. Every replay reads it and decides
alike; a completion that comes after it is ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from stepstone.records.calls import CALLBACK_TAKE_MEMO
from stepstone.records.codec import pack, unpack
from stepstone.records.layout import POSITION_MARK, Layout, place_of

MAX_BODY = 1 << 20
"""The largest completion a callback takes, in bytes (1 MiB): a larger one
fails the wait (:class:`~stepstone.errors.BadCallback`), and
``runner.complete_callback`` refuses one."""

_ID = re.compile(r"^([0-9a-f]{8,64})-([0-9a-f]{16})-((?:b[0-9.]+-)?[0-9]{8,})$")

Took = Literal["completed", "expired", "too-large"]


@dataclass(frozen=True, slots=True)
class CallbackId:
    """A callback's id, in its parts (see the module docstring)."""

    run_id: str
    incarnation: str
    token: str
    """Its place in the run: its memo's key segment without the ``#``."""

    def __str__(self) -> str:
        return f"{self.run_id}-{self.incarnation}-{self.token}"

    @property
    def segment(self) -> str:
        """The key segment of the callback's memo (``#00000003``)."""
        return POSITION_MARK + self.token

    def completion(self, layout: Layout) -> str:
        """Where its completion is put."""
        return layout.callback(self.run_id, self.incarnation, self.token)

    def taken(self, layout: Layout) -> str:
        """Where what its wait took is recorded."""
        return layout.memo(self.run_id, self.incarnation, CALLBACK_TAKE_MEMO + self.token)

    @classmethod
    def of(cls, run_id: str, incarnation: str, segment: str) -> CallbackId:
        """The id of the callback whose memo is at key segment ``segment``."""
        return cls(run_id, incarnation, segment.removeprefix(POSITION_MARK))

    @classmethod
    def parse(cls, text: object) -> CallbackId:
        """The id ``text`` holds; ValueError saying what a callback id is."""
        found = _ID.match(text) if isinstance(text, str) else None
        if found is None or place_of(POSITION_MARK + found[3]) is None:
            shown = repr(text if not isinstance(text, str) else text[:120])
            raise ValueError(
                f"not a callback id: {shown} (a callback's id is <run id>-<incarnation>-<place>, "
                "as cb.id gives it)"
            )
        return cls(found[1], found[2], found[3])


@dataclass(frozen=True, slots=True)
class Taken:
    """What a callback's wait took: a completion (its body and etag), its
    expiry, or a body too large (its size); and when (the worker's clock)."""

    took: Took
    at: float
    body: bytes = b""
    etag: str = ""
    size: int = 0

    def encode(self) -> bytes:
        fields: dict[str, object] = {"took": self.took, "at": self.at}
        if self.took != "expired":
            fields.update(body=self.body, etag=self.etag, size=self.size)
        return pack(fields)

    @classmethod
    def decode(cls, data: bytes) -> Taken:
        """ValueError saying what is wrong when ``data`` is no such record."""
        try:
            raw = unpack(data)
        except Exception as exc:
            raise ValueError(f"not MessagePack: {exc}") from None
        took = raw.get("took") if isinstance(raw, dict) else None
        if took not in ("completed", "expired", "too-large"):
            raise ValueError("not a record of what a callback's wait took")
        at, body, etag, size = (raw.get(k) for k in ("at", "body", "etag", "size"))
        if isinstance(at, bool) or not isinstance(at, int | float):
            raise ValueError("its time is missing or not a number")
        if took == "expired":
            return cls(took, float(at))
        if not isinstance(body, bytes) or not isinstance(etag, str) or not isinstance(size, int):
            raise ValueError("its body, etag or size is missing or of the wrong type")
        return cls(took, float(at), body, etag, size)


def expiry_of(recorded: object) -> float | None:
    """The expiry a callback's memo holds (None: it never expires);
    ValueError when it holds none."""
    expires = recorded.get("expires", False) if isinstance(recorded, dict) else False
    if expires is None:
        return None
    if isinstance(expires, bool) or not isinstance(expires, int | float):
        raise ValueError("it records no expiry")
    return float(expires)
