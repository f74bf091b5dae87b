"""Taking back, at a worker's start, the runs its previous life held.

A claim's token starts with a mark of its holder (a worker's id in its
place: :func:`stepstone.runtime.store_queue.size_hints.new_token`), so a
worker started again under the same id can tell its dead life's claims from
everyone else's and claim them again at once, instead of waiting out their
leases. Only a worker that holds its id's lock on this host does this
(:mod:`stepstone.runtime.worker.identity`): the previous life is then
certainly dead, and the swap that takes each record over fences its old
token off all the same.

Which records to read: a listing shows no holder, so the candidates are the
records that changed within ``within`` seconds. A live lease is renewed
every heartbeat, so a record its holder still held when it died changed
within its lease; older ones have lapsed and any claim takes them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection

from stepstone.store.errors import NotFound, PreconditionFailed, StoreUnavailable

from ..clock import Clock
from ..queue import Delivery
from .record_io import RecordIO
from .records import CorruptRecord, StoredJob, delivery_of
from .size_hints import holder_mark, new_token


async def reclaim(
    io: RecordIO,
    clock: Clock,
    holder: str,
    *,
    lease: float,
    limit: int,
    within: float,
    kinds: Collection[str] | None,
) -> list[Delivery]:
    """Claim again up to ``limit`` records held as ``holder`` (see the module docstring)."""
    mark = holder_mark(holder)
    since = clock.now() - within
    listed = io.store.scan(io.jobs)
    recent = [io.run_id_of(info.key) async for info in listed if info.modified >= since]
    io.stats.scans += 1
    read = await asyncio.gather(*(_read(io, run_id) for run_id in recent))
    out: list[Delivery] = []
    for found in read:
        if found is None or len(out) >= limit:
            continue
        etag, job = found
        if job.dead or job.token is None or not job.token.startswith(mark):
            continue
        if kinds is not None and job.kind not in kinds:
            continue
        now = clock.now()
        new = job.claimed(now, token=new_token(holder), lease_expires_at=now + lease)
        try:
            await io.swap(job.id, new, etag)
        except (NotFound, PreconditionFailed, StoreUnavailable):
            continue  # settled, cancelled or taken meanwhile; or left to lapse
        out.append(delivery_of(new))
    return out


async def _read(io: RecordIO, run_id: str) -> tuple[str, StoredJob] | None:
    with contextlib.suppress(CorruptRecord, StoreUnavailable):
        return await io.fetch(run_id)
    return None
