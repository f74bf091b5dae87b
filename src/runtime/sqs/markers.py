"""Job markers in the id store: what makes job ids fleet-wide on SQS.

SQS standard queues do not deduplicate and cannot find a message by id. With
an id store (an ObjectStore: the bucket) each live job has a marker,
written create-if-absent at enqueue, holding the job's message in full
(payload included) and a random token naming that enqueue. Enqueue-with-id
is then deduplicated fleet-wide; ``get`` and ``cancel`` work from any
process; and a delivery whose marker no longer names its enqueue (acked,
cancelled, dead-lettered, or enqueued again since) is a duplicate SQS
delivered, or a job this delivery lost. A payload too big to be worth
sending stays in the marker only (a spilled job), read back by the claim's
marker check at no extra request.
"""

from __future__ import annotations

import hashlib

from stepstone.store import AlreadyExists, NotFound, ObjectStore, PreconditionFailed

from .message import JobMessage, MalformedMessage, decode, encode


class IdMarkers:
    """One marker per live job under ``prefix`` in ``store``."""

    def __init__(self, store: ObjectStore, prefix: str) -> None:
        self.store = store
        self.prefix = prefix

    def key(self, run_id: str) -> str:
        """Where the job's marker is: job ids are any text, so the key is their SHA-256."""
        return f"{self.prefix}/{hashlib.sha256(run_id.encode()).hexdigest()}"

    async def create(self, message: JobMessage) -> bool:
        """Write the job's marker unless one exists; False if one did (the id is live)."""
        try:
            await self.store.put_if_absent(self.key(message.id), encode(message).encode())
        except AlreadyExists:
            return False
        return True

    async def write(self, message: JobMessage) -> None:
        """Replace the job's marker (it died, or came back from the dead)."""
        await self.store.put(self.key(message.id), encode(message).encode())

    async def read(self, run_id: str) -> JobMessage | None:
        """The job's marker, or None when it has none. A marker that is not a
        job's message with its payload raises MalformedMessage."""
        found = await self._read(run_id)
        return None if found is None else found[0]

    async def _read(self, run_id: str) -> tuple[JobMessage, str] | None:
        key = self.key(run_id)
        try:
            found = await self.store.get(key)
        except NotFound:
            return None
        try:
            marker = decode(found.data)
        except MalformedMessage as exc:
            raise MalformedMessage(f"id-store marker {key} of job {run_id!r}: {exc}") from exc
        if marker.payload is None:
            raise MalformedMessage(f"id-store marker {key} of job {run_id!r} has no payload")
        return marker, found.etag

    async def of(self, message: JobMessage) -> JobMessage | None:
        """The marker of ``message``'s job if it still names the enqueue the
        message came from (the same token), else None."""
        found = await self.version_of(message)
        return None if found is None else found[0]

    async def version_of(self, message: JobMessage) -> tuple[JobMessage, str] | None:
        """``of``, with the marker's etag: the version a settlement deletes
        (``drop(..., if_match=)``), so that of two holders of one job only
        one settles it."""
        found = await self._read(message.id)
        if found is None or found[0].token != message.token:
            return None
        return found

    async def drop_dead(self, run_id: str) -> bool:
        """Delete the job's marker if it says the job is dead, fenced on the
        version read; True if it did."""
        key = self.key(run_id)
        try:
            found = await self.store.get(key)
        except NotFound:
            return False
        try:
            dead = decode(found.data).dead_reason is not None
        except MalformedMessage:
            return False
        if not dead:
            return False
        try:
            await self.store.delete(key, if_match=found.etag)
        except (NotFound, PreconditionFailed):
            return False
        return True

    async def drop(self, run_id: str, *, if_match: str | None = None) -> bool:
        """Delete the job's marker (only the version ``if_match``, if given);
        False if it was gone, or replaced since."""
        try:
            await self.store.delete(self.key(run_id), if_match=if_match)
        except (NotFound, PreconditionFailed):
            return False
        return True
