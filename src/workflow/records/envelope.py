"""The payload a job travels in through the queue.

The queue moves opaque bytes; this is what the workflow layer puts in them:
which job type, its canonical input, the hash an idempotent resubmit is
compared against, and which incarnation of its run id this enqueue started
(memos are keyed by it, so a later incarnation never replays an earlier
one's steps); what an operator finds runs by: the job type's version
and the idempotency key; and, for a replay, the incarnation it replays.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from stepstone.records.attributes import stored_attributes
from stepstone.records.codec import pack, sha256_hex, unpack
from stepstone.runtime import plausible
from stepstone.runtime.errors import MalformedPayload

ENVELOPE_VERSION = 1
HISTORY_BY_BRANCH = 2
"""``hist`` in an envelope whose run numbers its calls by branch."""


def input_hash(kind: str, data: bytes) -> str:
    """What "the same input" means for an idempotency key: the job's kind
    and its canonical input bytes."""
    return sha256_hex(kind.encode(), data)


@dataclass(frozen=True, slots=True)
class Envelope:
    """A queued job's payload: which job type, its canonical input, and which
    incarnation of its run id this enqueue started."""

    kind: str
    input: bytes
    incarnation: str
    input_hash: str
    keyed: bool
    parent: str | None = None
    """The run that submitted this one as its child (woken when this one ends)."""
    version: str | None = None
    """The job type's ``VERSION`` when the run was submitted (None: it has none)."""
    key: str | None = None
    """The idempotency key the run was submitted with (None: it had none)."""
    replay_of: str | None = None
    """The incarnation this one replays (``runner.replay``): its memos before
    ``from_step`` were copied here, and its attempt history stays under it."""
    from_step: str | None = None
    """The step a replay runs from (None: from the start)."""
    numbered: bool = True
    """The run's calls are numbered in their branch
    (:mod:`stepstone.execute.branches`); False for a run submitted before
    branches existed, whose calls take the run's next position in the order
    they start, as they did then."""
    attributes: Mapping[str, str] = field(default_factory=dict)
    """The attributes the run was submitted with (:mod:`stepstone.records.attributes`)."""

    def encode(self) -> bytes:
        fields: dict[str, object] = {
            "v": ENVELOPE_VERSION,
            "kind": self.kind,
            "input": self.input,
            "inc": self.incarnation,
            "ih": self.input_hash,
            "keyed": self.keyed,
        }
        if self.parent is not None:
            fields["par"] = self.parent
        if self.version is not None:
            fields["ver"] = self.version
        if self.key is not None:
            fields["key"] = self.key
        if self.replay_of is not None:
            fields["rep"] = self.replay_of
        if self.from_step is not None:
            fields["from"] = self.from_step
        if self.numbered:
            fields["hist"] = HISTORY_BY_BRANCH
        if self.attributes:
            fields["attr"] = dict(self.attributes)
        return pack(fields)

    @classmethod
    def decode(cls, data: bytes) -> Envelope:
        try:
            raw = unpack(data)
            if not isinstance(raw, dict) or raw.get("v") != ENVELOPE_VERSION:
                raise ValueError("not a stepstone job envelope")
            envelope = cls(
                kind=raw["kind"] if "kind" in raw else raw["name"],
                input=raw["input"],
                incarnation=raw["inc"],
                input_hash=raw["ih"],
                keyed=bool(raw["keyed"]),
                parent=raw.get("par"),
                version=raw.get("ver"),
                key=raw.get("key"),
                replay_of=raw.get("rep"),
                from_step=raw.get("from"),
                numbered=raw.get("hist") == HISTORY_BY_BRANCH,
                attributes=stored_attributes(raw.get("attr")),
            )
            if not isinstance(envelope.kind, str) or not isinstance(envelope.input, bytes):
                raise ValueError("kind or input has the wrong type")
            for name, text in (("inc", envelope.incarnation), ("ih", envelope.input_hash)):
                if not isinstance(text, str) or not text or "/" in text:
                    raise ValueError(f"field {name!r} is not a name: {plausible.shown(text)}")
            if type(raw["keyed"]) not in (bool, int) or raw["keyed"] not in (0, 1):
                raise ValueError(f"field 'keyed' is not a bool: {plausible.shown(raw['keyed'])}")
            optional = (
                envelope.parent,
                envelope.version,
                envelope.key,
                envelope.replay_of,
                envelope.from_step,
            )
            if not all(text is None or isinstance(text, str) for text in optional):
                raise ValueError("parent, version, key, or what it replays has the wrong type")
            return envelope
        except Exception as exc:
            raise MalformedPayload(f"the job's payload could not be decoded: {exc}") from exc


def incarnation_of(payload: bytes) -> str | None:
    """The incarnation a queued payload started; None when it is no envelope."""
    try:
        return Envelope.decode(payload).incarnation
    except MalformedPayload:
        return None
