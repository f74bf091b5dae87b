"""Creating records: each one create-if-absent, a batch of them in one
``put_many_if_absent``, and a create whose answer was lost decided by what
the store holds.

A batch is one request to the store, so a FileStore makes every create of it
durable with one flush of its journal. A create refused because the key is
taken is a duplicate (``created=False``). A create whose answer was lost
(a timeout, a 5xx) may have landed: the record's random ``nonce`` makes its
bytes unique, so a read of the key says whether it is ours
(:mod:`stepstone.runtime.store_queue.lost_answers`).
"""

from __future__ import annotations

import asyncio
import secrets

from stepstone.store.errors import AlreadyExists, PreconditionFailed, StoreError, StoreUnavailable
from stepstone.store.file import RecoverableObject

from ..queue import Enqueued, NewJob, check_enqueue
from .lost_answers import landed
from .record_io import RecordIO
from .records import StoredJob, encode_created


def new_record(
    job: NewJob, now: float, *, default_max_attempts: int, max_payload_bytes: int
) -> StoredJob:
    """The record an enqueue of ``job`` creates (its arguments checked)."""
    run_id = check_enqueue(
        job.payload,
        id=job.id,
        priority=job.priority,
        max_attempts=job.max_attempts,
        max_payload_bytes=max_payload_bytes,
        run_at=job.run_at,
    )
    return StoredJob(
        id=run_id,
        kind=job.kind,
        payload=bytes(job.payload),
        priority=job.priority,
        max_attempts=job.max_attempts or default_max_attempts,
        run_at=now if job.run_at is None else float(job.run_at),
        created_at=now,
        updated_at=now,
        nonce=secrets.token_hex(8),
        headers=dict(job.headers or {}),
    )


async def create(io: RecordIO, records: list[StoredJob]) -> list[Enqueued | BaseException]:
    """One create-if-absent per record, all in one ``put_many_if_absent``
    (a FileStore makes them durable with one flush of its journal); what
    each did. A record that a recovery after a power cut writes back
    counts as claimed once more (``claims``), so its worker looks for an
    outcome before running it: the record may be one that was acked or
    cancelled just before the cut (docs/storage.md)."""
    encoded = [encode_created(record) for record in records]
    created = await io.store.put_many_if_absent(
        [
            RecoverableObject(io.key(r.id), data, recovered)
            for r, (data, recovered) in zip(records, encoded, strict=True)
        ]
    )
    answers: list[Enqueued | BaseException] = []
    unsure: list[tuple[int, StoredJob, bytes, StoreError]] = []
    for record, (data, _), result in zip(records, encoded, created, strict=True):
        if isinstance(result, str):  # (the common case, answered without a coroutine)
            io.cache.learn(record.id, result, record, len(data))
            answers.append(Enqueued(record.id, created=True, version=result))
        else:  # refused, or its answer lost: ``_created`` says which
            unsure.append((len(answers), record, data, result))
            answers.append(Enqueued(record.id, created=False))
    decided = await asyncio.gather(
        *(_created(io, record, data, result) for _, record, data, result in unsure),
        return_exceptions=True,
    )
    for (i, *_), answer in zip(unsure, decided, strict=True):
        answers[i] = answer
    return answers


async def _created(io: RecordIO, job: StoredJob, data: bytes, result: StoreError) -> Enqueued:
    """What one create of ``put_many_if_absent`` that did not answer an etag
    did, as an Enqueued."""
    if isinstance(result, AlreadyExists):
        return Enqueued(job.id, created=False)
    found: str | StoreError = result
    if isinstance(result, StoreUnavailable):
        # The create may have landed with only its answer lost. The nonce
        # makes our bytes unique: if the record holds them, it is ours.
        try:
            found = await landed(io.store, io.key(job.id), data, None, result)
        except PreconditionFailed:
            return Enqueued(job.id, created=False)
    if isinstance(found, StoreError):
        raise found
    io.cache.learn(job.id, found, job, len(data))
    return Enqueued(job.id, created=True, version=found)
