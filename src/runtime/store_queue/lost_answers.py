"""Finding out whether a write whose answer was lost happened.

A timeout or a 5xx after the request was sent leaves a write in doubt: it
may have landed. Raising would be wrong both ways: an enqueue that did land
would be retried as a false duplicate, and an ack that did land would be
reported failed though the job is gone. Every StoreQueue write's bytes are
unique (a record's ``rev`` and ``nonce``, :mod:`stepstone.runtime.store_queue.records`),
so one read of the record decides.
"""

from __future__ import annotations

from stepstone.store.base import ObjectStore
from stepstone.store.errors import NotFound, PreconditionFailed, StoreUnavailable


async def landed(
    store: ObjectStore, key: str, data: bytes | None, old: str | None, error: StoreUnavailable
) -> str:
    """After a write of ``data`` (None: a delete) over version ``old`` (None:
    a create) failed with ``error`` and no answer, find out whether it happened.

    A record holding exactly ``data`` is our write, and an absent one is our
    delete: return the etag (or ""). A record still at ``old`` (absent, for a
    create) means nothing happened: raise ``error``, the caller may try
    again. Anything else is another writer's version: PreconditionFailed, as
    if our write had been refused (had it landed first, that writer has
    replaced it anyway). If the read fails too, ``error`` is raised: the
    caller cannot know, and must treat it as a failure that may have happened.
    """
    try:
        obj = await store.get(key)
    except NotFound:
        if data is None:
            return ""
        if old is None:
            raise error from None
        raise NotFound("gone", key=key) from error
    except StoreUnavailable:
        raise error from None
    if data is not None and obj.data == data:
        return obj.etag
    if obj.etag == old:
        raise error
    raise PreconditionFailed("changed by another writer", key=key) from error
