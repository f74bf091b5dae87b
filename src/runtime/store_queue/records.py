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
size is made to say the record's priority and its fairness key's class:
every record is padded (a ``pad`` field of at most 322 bytes, ignored by
readers) to a size whose remainder modulo 10 is its priority
(:func:`listed_priority`) and whose tens, modulo 32, are the class
(:func:`listed_bucket`): of its fairness key while it waits
(:func:`stepstone.runtime.fairness.bucket_of`), :data:`HELD_CLASS` while
it is held, so that a renewal elsewhere keeps a held record's size and
every other change of it changes the size. A process that lists the queue
then reads the records it does not know in about the order it would claim
them, so an urgent job another process enqueued is read ahead of a backlog,
and a tenant's job beside another tenant's backlog (docs/queue.md;
benchmarks/NOTES.md measures it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import msgpack

from .. import plausible
from ..errors import QueueError
from ..fairness import FAIRNESS_BUCKETS, FAIRNESS_HEADERS, bucket_of, fairness_of
from ..queue import Delivery, JobRecord
from ..run_id import is_storable_id
from ..status import SUSPENDED_STATUSES, JobStatus, Wait

__all__ = [
    "HELD_CLASS",
    "CorruptRecord",
    "StoredJob",
    "decode",
    "delivery_of",
    "encode",
    "encode_created",
    "record_of",
    "listed_bucket",
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
    lapses: int = 0
    """Claims taken over after their lease lapsed (``Delivery.lapses``)."""
    pending: tuple[str, ...] = ()
    """What a suspended job's wait still needs, by id (``Wait.pending``)."""
    arrivals: tuple[str, ...] = ()
    """What wakes said arrived while the job was held (``wake(arrived=)``):
    its suspension takes them off what its wait needs."""
    partial: bool = False
    """True when the payload and headers were dropped to save memory (a cache
    entry for a job another process holds, or a dead one). Never written."""
    took_over: bool = field(default=False, compare=False)
    """Set by :meth:`claimed` on a takeover of a lapsed lease, for the
    delivery to say so. Never written, nor part of what a record is."""

    def next(self, now: float, **changes: Any) -> StoredJob:
        """The record's next version: ``changes`` applied, ``rev`` bumped."""
        return replace(self, rev=self.rev + 1, updated_at=now, **changes)

    def claimed(self, now: float, *, token: str, lease_expires_at: float) -> StoredJob:
        """The version a claim writes: held under ``token`` until
        ``lease_expires_at``, one more claim, no longer waiting; one more
        attempt, or, taking over a claim whose lease lapsed (the record
        still holds its token), one more lapse instead: that claim's attempt
        never ended, and this one goes on with it. A claim, a reclaim and a
        guess at another process's claim write (or assume) the same fields,
        so they are set here once."""
        takeover = self.token is not None
        return self.next(
            now,
            attempts=self.attempts if takeover else self.attempts + 1,
            lapses=self.lapses + 1 if takeover else self.lapses,
            claims=self.claims + 1,
            token=token,
            lease_expires_at=lease_expires_at,
            wait=None,
            woken=False,
            pending=(),
            arrivals=(),
            took_over=takeover,
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
        """This record without its payload and headers (but for its
        fairness key's, which order its claim), for the cache."""
        kept = {k: v for k, v in self.headers.items() if k in FAIRNESS_HEADERS}
        return replace(self, payload=b"", headers=kept, partial=True)


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
    "lapses": ((int,), 0),
    "pending": ((list, tuple), ()),
    "arrivals": ((list, tuple), ()),
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
        raise ValueError(f"job {job.id}: a stripped cache record must never be written")
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
    # Widen the empty pad (the last byte) so that the size says the priority
    # and the fairness key's class: size % 10 and size // 10 % FAIRNESS_BUCKETS.
    # A held record has a class of its own: a renewal keeps the size, and
    # every other change of a held record changes it (size_hints).
    bucket = HELD_CLASS if job.token is not None else bucket_of(fairness_of(job.headers)[0])
    target = job.priority + _PRIORITIES * bucket
    return data[:-1] + _pad(target, len(data) - 1)


def _pad(target: int, before: int) -> bytes:
    """The shortest msgpack str (its header and ``-`` bytes) that makes a
    record of ``before`` bytes and it ``target`` modulo _SIZE_CLASSES."""
    best: bytes | None = None
    for header, least, most in _STR_HEADERS:
        n = (target - before - len(header(0))) % _SIZE_CLASSES
        while n < least:
            n += _SIZE_CLASSES
        if n <= most and (best is None or n + len(header(n)) < len(best)):
            best = header(n) + b"-" * n
    assert best is not None
    return best


HELD_CLASS = FAIRNESS_BUCKETS - 1
"""The class a held record's size says, whatever its fairness key."""
_SIZE_CLASSES = _PRIORITIES * FAIRNESS_BUCKETS
"""A record's size modulo this says its priority and its fairness key's class."""
_STR_HEADERS = (
    (lambda n: bytes([_EMPTY_STR | n]), 0, 31),
    (lambda n: bytes([0xD9, n]), 32, 255),
    (lambda n: bytes([0xDA]) + n.to_bytes(2, "big"), 256, 65535),
)
"""msgpack's str headers (fixstr, str8, str16), with the lengths each takes."""


def listed_priority(size: int) -> int:
    """The priority (0 to 9) a record of ``size`` bytes was written with.

    Only a hint: a record written by something else (an older version, a
    corrupt object) has a size that means nothing. A queue uses it to choose
    what to read first, never to decide a claim.
    """
    return size % _PRIORITIES


def listed_bucket(size: int) -> int:
    """The class of fairness key (:func:`stepstone.runtime.fairness.bucket_of`)
    a record of ``size`` bytes was written with: a hint, as its priority is."""
    return size // _PRIORITIES % FAIRNESS_BUCKETS


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
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise CorruptRecord(f"field {name!r} has a {type(value).__name__}", key=key)
        values[name] = value
    for name in ("pending", "arrivals"):
        ids = values[name]
        if not all(isinstance(run_id, str) and is_storable_id(run_id) for run_id in ids):
            raise CorruptRecord(f"field {name!r} holds something that is not a run id", key=key)
        values[name] = tuple(ids)
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
    plausible.count(values["lapses"], "lapses")
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
        lapses=job.lapses,
    )


def wait_of(job: StoredJob, now: float) -> Wait | None:
    """What a suspended record waits for, while it does."""
    if job.wait is None or job.token is not None or job.dead or job.run_at <= now:
        return None
    return Wait(JobStatus(job.wait[0]), job.wait[1], pending=job.pending)


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
        lapses=job.lapses,
        took_over=job.took_over,
    )
