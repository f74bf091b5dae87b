"""The StoreQueue's job record: one msgpack object per job, and its codec.

Kept apart from the queue's logic so the format is in one short place: what
is stored, how it is checked on the way in, why each field is there, and
what a record answers in the contract's terms (:func:`record_of`,
:func:`delivery_of`).

A record is compare-and-swapped on its etag, and on S3 an etag is the MD5 of
the body, so two writes of identical bytes would share one and a stale
writer's swap could succeed. Every write therefore bumps ``rev``, and every
incarnation of an id carries a random ``nonce``: no two writes of one key
ever produce the same bytes.

A listing shows each record's size and nothing else of what it holds, so the
size is made to say the record's priority: every record is padded (a ``pad``
field of up to 9 bytes, ignored by readers) to a size whose remainder modulo
10 is its priority (:func:`listed_priority`). A process that lists the queue
then reads the records it does not know in about the order it would claim
them, so an urgent job another process enqueued is read ahead of a backlog
(docs/queue.md; benchmarks/NOTES.md measures it, and why the size no longer
also says whether the record is held).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import msgpack

from .. import plausible
from ..errors import QueueError
from ..queue import SUSPENDED_STATUSES, Delivery, JobRecord, JobStatus, Wait

__all__ = [
    "CorruptRecord",
    "StoredJob",
    "decode",
    "delivery_of",
    "encode",
    "encode_created",
    "record_of",
    "listed_priority",
    "status_of",
]

FORMAT = 1
"""Bumped when the record's layout changes incompatibly; a reader refuses others."""

_PRIORITIES = 10
"""Priorities 0 to 9: the remainder of a record's size modulo this is its priority."""

_PAD_FIELD = b"\xa3pad"
"""``pad`` as msgpack: the last key of every record."""
_EMPTY_STR = 0xA0
"""msgpack's fixstr of length 0; ``0xA0 | n`` starts one of length n (n < 32)."""


_REASON_CHARS = 300
"""The most of a reason a CorruptRecord's message keeps: what a bad value
held is shown, not written out."""


class CorruptRecord(QueueError):
    """A queue record's bytes could not be decoded (truncated, garbage, another format).

    ``key`` names the object so a person can inspect or delete it.
    """

    def __init__(self, message: str, *, key: str) -> None:
        if len(message) > _REASON_CHARS:  # (so the key is never cut off a shortened message)
            message = f"{message[: _REASON_CHARS - 3]}..."
        super().__init__(f"{message} (record {key})")
        self.key = key
        self.reason = message


@dataclass(slots=True)
class StoredJob:
    """One job as its object holds it. ``token`` is set while claimed."""

    id: str
    kind: str
    payload: bytes
    priority: int
    max_attempts: int
    run_at: float
    created_at: float
    updated_at: float
    nonce: str
    headers: dict[str, str] = field(default_factory=dict)
    attempts: int = 0
    claims: int = 0
    rev: int = 1
    token: str | None = None
    lease_expires_at: float | None = None
    dead: bool = False
    last_error: str | None = None
    dead_reason: str | None = None
    wait: tuple[str, str] | None = None
    """A suspended job's wait: (status value, detail), for people to see."""
    woken: bool = False
    """Set by a wake while the job was held: its suspension returns at once."""
    partial: bool = False
    """True when the payload and headers were dropped to save memory (a view
    entry for a job another process holds, or a dead one). Never written."""

    def next(self, now: float, **changes: Any) -> StoredJob:
        """The record's next version: ``changes`` applied, ``rev`` bumped."""
        return replace(self, rev=self.rev + 1, updated_at=now, **changes)

    def claimed(self, now: float, *, token: str, lease_expires_at: float) -> StoredJob:
        """The version a claim writes: held under ``token`` until
        ``lease_expires_at``, one more attempt and claim, no longer waiting.
        A claim, a reclaim and a guess at another process's claim write (or
        assume) the same fields, so they are set here once."""
        return self.next(
            now,
            attempts=self.attempts + 1,
            claims=self.claims + 1,
            token=token,
            lease_expires_at=lease_expires_at,
            wait=None,
            woken=False,
        )

    @property
    def due(self) -> float:
        """When it becomes claimable: its run-at while waiting, its lease's
        expiry while held (a held record has a lease: see :func:`decode`)."""
        return self.run_at if self.lease_expires_at is None else self.lease_expires_at

    def claimable(self, now: float) -> bool:
        if self.dead:
            return False
        if self.token is None:
            return self.run_at <= now
        return self.lease_expires_at is not None and self.lease_expires_at <= now

    def stripped(self) -> StoredJob:
        """This record without its payload and headers, for the view."""
        return replace(self, payload=b"", headers={}, partial=True)


_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "kind": (str,),
    "payload": (bytes,),
    "priority": (int,),
    "max_attempts": (int,),
    "run_at": (float, int),
    "created_at": (float, int),
    "updated_at": (float, int),
    "nonce": (str,),
    "headers": (dict,),
    "attempts": (int,),
    "claims": (int,),
    "rev": (int,),
    "token": (str, type(None)),
    "lease_expires_at": (float, int, type(None)),
    "dead": (bool,),
    "last_error": (str, type(None)),
    "dead_reason": (str, type(None)),
}
_OPTIONAL: dict[str, tuple[tuple[type, ...], Any]] = {
    "wait": ((list, type(None)), None),
    "woken": ((bool,), False),
}
"""Fields added later: written only when set, so records without them (older
ones, and most) decode unchanged, and an older reader ignores them."""


def encode(job: StoredJob) -> bytes:
    return _packed(job, _body(job))


def encode_created(job: StoredJob) -> tuple[bytes, bytes]:
    """A new record's bytes, and the bytes a recovery after a power cut writes
    back in its place (``put_many_if_absent``'s ``recovered``): the same
    record counted as claimed once more, so that its worker looks for an
    outcome before running it (it may have run and been acked before the
    cut), and its ``rev`` bumped, so that no two versions share bytes."""
    body = _body(job)
    data = _packed(job, body)
    body["claims"] = job.claims + 1
    body["rev"] = job.rev + 1
    return data, _packed(job, body)


def _body(job: StoredJob) -> dict[str, Any]:
    if job.partial:
        raise ValueError(f"job {job.id}: a stripped view record must never be written")
    body: dict[str, Any] = {"format": FORMAT}
    for name in _FIELDS:
        body[name] = getattr(job, name)
    for name, (_, default) in _OPTIONAL.items():
        if getattr(job, name) != default:
            body[name] = getattr(job, name)
    return body


def _packed(job: StoredJob, body: dict[str, Any]) -> bytes:
    body.pop("pad", None)
    body["pad"] = ""  # the last key
    data: bytes = msgpack.packb(body, use_bin_type=True)
    if not data.endswith(_PAD_FIELD + bytes([_EMPTY_STR])):
        raise RuntimeError(f"job {job.id}: msgpack did not end the record with its empty pad")
    # Widen the empty pad (the last byte) by n bytes, so that the size says the priority.
    n = (job.priority - len(data)) % _PRIORITIES
    return data[:-1] + bytes([_EMPTY_STR | n]) + b"-" * n


def listed_priority(size: int) -> int:
    """The priority (0 to 9) a record of ``size`` bytes was written with.

    Only a hint: a record written by something else (an older version, a
    corrupt object) has a size that means nothing. A queue uses it to choose
    what to read first, never to decide a claim.
    """
    return size % _PRIORITIES


def decode(data: bytes, *, key: str) -> StoredJob:
    """Decode and type-check a record; anything unexpected raises CorruptRecord."""
    try:
        body = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated classes
        raise CorruptRecord(f"not a msgpack queue record: {exc}", key=key) from exc
    if not isinstance(body, dict):
        raise CorruptRecord(f"expected a map, found {type(body).__name__}", key=key)
    if body.get("format") != FORMAT:
        raise CorruptRecord(f"unknown record format {plausible.shown(body.get('format'))}", key=key)
    values: dict[str, Any] = {}
    for name, types in _FIELDS.items():
        if name not in body:
            raise CorruptRecord(f"field {name!r} is missing", key=key)
        value = body[name]
        # bool is an int: refuse it where a number is meant.
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise CorruptRecord(
                f"field {name!r} has a {type(value).__name__}, not the expected type", key=key
            )
        values[name] = float(value) if float in types and isinstance(value, int) else value
    headers = values["headers"]
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise CorruptRecord("headers must map str to str", key=key)
    for name, (types, default) in _OPTIONAL.items():
        value = body.get(name, default)
        if not isinstance(value, types):
            raise CorruptRecord(f"field {name!r} has a {type(value).__name__}", key=key)
        values[name] = value
    wait = values["wait"]
    if wait is not None:
        if not (len(wait) == 2 and all(isinstance(part, str) for part in wait)):
            raise CorruptRecord("field 'wait' is not [status, detail]", key=key)
        if wait[0] not in _WAIT_STATUSES:
            raise CorruptRecord(f"field 'wait' has an unknown status {wait[0]!r}", key=key)
        values["wait"] = (wait[0], wait[1])
    if (values["token"] is None) != (values["lease_expires_at"] is None):
        raise CorruptRecord("a claim needs both a token and a lease expiry", key=key)
    try:
        _check_plausible(values)
    except plausible.Implausible as exc:
        raise CorruptRecord(f"holds a value no run could have written: {exc}", key=key) from exc
    return StoredJob(**values)


def _check_plausible(values: dict[str, Any]) -> None:
    """Every time and count of a decoded record, against what could be real
    (:mod:`stepstone.runtime.plausible`): a NaN run-at is never due, a lease
    expiry of ``inf`` is never taken over, a negative ``claims`` would skip
    the run's memos, a ``max_attempts`` of 2**63 retries for good."""
    plausible.count(values["priority"], "priority", most=_PRIORITIES - 1)
    plausible.count(values["max_attempts"], "max_attempts", least=1)
    plausible.count(values["attempts"], "attempts")
    plausible.count(values["claims"], "claims")
    plausible.count(values["rev"], "rev", most=plausible.MAX_REVISION)
    plausible.due(values["run_at"], "run_at")
    for name in ("created_at", "updated_at"):
        plausible.time(values[name], name)
    plausible.optional_time(
        values["lease_expires_at"], "lease_expires_at", ahead=plausible.LEASE_AHEAD
    )


_WAIT_STATUSES = {status.value for status in SUSPENDED_STATUSES}


def status_of(job: StoredJob, now: float) -> JobStatus:
    if job.dead:
        return JobStatus.DEAD
    if job.token is not None:
        return JobStatus.RUNNING
    if job.run_at <= now:
        return JobStatus.READY
    return JobStatus.SCHEDULED if job.wait is None else JobStatus(job.wait[0])


def record_of(job: StoredJob, now: float) -> JobRecord:
    return JobRecord(
        id=job.id,
        kind=job.kind,
        status=status_of(job, now),
        priority=job.priority,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        run_at=job.run_at,
        created_at=job.created_at,
        updated_at=job.updated_at,
        payload=job.payload,
        headers=dict(job.headers),
        lease_expires_at=job.lease_expires_at,
        last_error=job.last_error,
        dead_reason=job.dead_reason,
        wait=wait_of(job, now),
    )


def wait_of(job: StoredJob, now: float) -> Wait | None:
    """What a suspended record waits for, while it does."""
    if job.wait is None or job.token is not None or job.dead or job.run_at <= now:
        return None
    return Wait(JobStatus(job.wait[0]), job.wait[1])


def delivery_of(job: StoredJob) -> Delivery:
    """The claim a record holding a token hands to its holder."""
    assert job.token is not None and job.lease_expires_at is not None
    return Delivery(
        id=job.id,
        kind=job.kind,
        payload=job.payload,
        attempt=job.attempts,
        max_attempts=job.max_attempts,
        token=job.token,
        lease_expires_at=job.lease_expires_at,
        priority=job.priority,
        headers=dict(job.headers),
        enqueued_at=job.created_at,
        claims=job.claims,
    )
