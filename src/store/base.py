"""The ObjectStore contract: the few operations the engine needs, no more.

Every write that decides ownership is conditional: ``put_if_absent`` (first
writer wins) and ``put_if_match`` (compare-and-swap on the etag). Everything
else in the engine, the lease queue, memoized steps, outcome records, is
built from these and from ordered listing.

Etags are opaque strings. Two different writes of the same bytes may share
an etag on S3 (it is the MD5 of the body), so a record that is
compare-and-swapped must carry a version or a token in its body; see
docs/storage.md.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .errors import NotFound, StoreError
from .keys import MAX_KEY_LENGTH
from .parts import Parts, SplitObject, Splitter, split_in_memory

DEFAULT_PAGE_SIZE = 1000
"""S3's maximum page for ListObjectsV2; the other backends honour the same bound."""


_URGENT: contextvars.ContextVar[bool] = contextvars.ContextVar("stepstone_urgent", default=False)


@contextlib.contextmanager
def urgent() -> Iterator[None]:
    """A hint to the store: the requests made inside this block (in this
    task) go before any of the process's requests waiting to be sent. A
    lease's renewal is one: it must not queue behind the writes of the work
    it holds, or a process slowed to its share of a store's limit renews
    late, its leases lapse, and the runs they hold are claimed again and run
    twice. A store that does not pace its requests has nothing to do (an
    S3Store does: stepstone.store.s3.send_rate). Such requests should be few
    (one a job every third of its lease); they are still answered and
    counted as any other."""
    token = _URGENT.set(True)
    try:
        yield
    finally:
        _URGENT.reset(token)


def is_urgent() -> bool:
    """Whether the request being made is sent inside :func:`urgent`."""
    return _URGENT.get()


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What a listing or a head tells about one object."""

    key: str
    etag: str
    size: int
    modified: float
    """Last-modified time in epoch seconds, in the store's clock."""


@dataclass(frozen=True, slots=True)
class NewObject:
    """One object for :meth:`ObjectStore.put_many_if_absent` to create. A
    store may take a subclass that says more about the create (a FileStore:
    :class:`stepstone.store.file.RecoverableObject`); every store creates
    ``data`` at ``key``."""

    key: str
    data: bytes


@dataclass(frozen=True, slots=True)
class StoredObject:
    """An object's bytes and the etag to compare-and-swap against."""

    key: str
    data: bytes
    etag: str


@runtime_checkable
class ChangeNotices(Protocol):
    """A store that can tell, as it happens, that an object was placed under
    a prefix, by any process: a FileStore or a SqliteStore on Linux
    (inotify). A notice is a
    hint for a reader that would otherwise list again to find out, never
    the only way a change is found: notices can be lost."""

    def watch_changes(
        self, prefix: str, on_change: Callable[[str | None], None]
    ) -> Callable[[], None] | None:
        """Call ``on_change(key)`` on the running event loop for each object
        created or replaced directly under ``prefix`` (ending in ``/``), and
        ``on_change(None)`` when notices were lost. Returns the function that
        stops it, or None when this store cannot here."""


@runtime_checkable
class ProviderNotes(Protocol):
    """A store whose provider may do what the engine needs in a way of its
    own, which the store finds out and works with (an S3Store: etags in
    If-Match without quotes, a DeleteObject that ignores If-Match): what it
    found, for ``stepstone check-store`` to report."""

    async def provider_notes(self) -> list[str]:
        """One sentence for each way the provider does what the engine needs,
        and what the store does about it, found out now where not yet known
        (a few requests under the store's prefix, removed after)."""


MAX_PRESIGNED_LIFETIME = 7 * 86_400
"""The longest a presigned URL lives, in seconds: S3's limit for a URL
signed with Signature Version 4 (seven days)."""


@runtime_checkable
class PresignsPuts(Protocol):
    """A store that can hand out a URL through which anyone holding it may
    PUT one object, with no credentials of their own: an S3Store (a
    presigned PUT). The URL is a bearer credential for that one key until it
    expires: whoever holds it can write the object, as often as they like."""

    async def presign_put(self, key: str, expires_in: float) -> str | None:
        """A URL that PUTs the object ``key`` for the next ``expires_in``
        seconds (at most :data:`MAX_PRESIGNED_LIFETIME`; less when the
        credentials that sign it expire sooner, as a role's do), or None
        when this store cannot (a wrapper of a store that presigns nothing).
        Signing is local: no request is sent."""


class ObjectStore(abc.ABC):
    """An async object store with conditional writes.

    Keys are relative to the store's root (a bucket prefix, a directory) and
    validated by :func:`store.keys.validate_key`. All methods raise
    :class:`store.errors.StoreError` subclasses only.
    """

    location: str
    """A human-readable name for the store, used in every error message."""

    key_limit: int = MAX_KEY_LENGTH
    """The longest key this store takes, in UTF-8 bytes: S3's 1,024, less an
    S3Store's own prefix and its slash (a wrapper reports its inner store's)."""

    remote: bool = False
    """Whether each call is a request to a service, billed per request (S3;
    a wrapper reports its inner store's). Callers that can trade a request
    for work elsewhere do so on a remote store: a keyed submit there creates
    its run's queue record before it looks for an outcome, and looks once
    (the keyed submit, ``JobRunner.submit`` with a key)."""

    @abc.abstractmethod
    async def get(self, key: str) -> StoredObject:
        """The object's bytes and etag. Raises NotFound."""

    async def get_many(self, keys: Sequence[str]) -> list[StoredObject | None]:
        """Each key's object, or None where there is none: ``get`` for many
        keys, which a store may serve together (the FileStore reads them all
        in one trip to its reading thread)."""

        async def one(key: str) -> StoredObject | None:
            try:
                return await self.get(key)
            except NotFound:
                return None

        return list(await asyncio.gather(*(one(key) for key in keys)))

    @abc.abstractmethod
    async def head(self, key: str) -> ObjectInfo:
        """The object's etag, size and modification time. Raises NotFound."""

    @abc.abstractmethod
    async def put(self, key: str, data: bytes) -> str:
        """Write unconditionally; return the new etag."""

    @abc.abstractmethod
    async def put_if_absent(self, key: str, data: bytes) -> str:
        """Create the object only if no object has the key; return the new etag.

        Raises AlreadyExists when another writer got there first.
        """

    async def put_many_if_absent(self, objects: Sequence[NewObject]) -> list[str | StoreError]:
        """Create each object whose key no object has, as ``put_if_absent`` does
        one; returns, in order, each one's etag or the error that refused it
        (AlreadyExists when another writer got there first). Objects of one key
        are created in order: the first can win, the rest find it there.

        A store may make the whole batch durable at once: the FileStore does,
        with one flush of a journal of its creates (docs/storage.md, and
        :class:`stepstone.store.file.RecoverableObject` for what a recovery
        from that journal writes back); a SqliteStore makes it in one
        transaction.
        """
        results: list[str | StoreError] = [""] * len(objects)
        by_key: dict[str, list[int]] = {}
        for i, obj in enumerate(objects):
            by_key.setdefault(obj.key, []).append(i)

        async def create(indexes: list[int]) -> None:
            for i in indexes:  # one key's objects in order; keys side by side
                try:
                    results[i] = await self.put_if_absent(objects[i].key, objects[i].data)
                except StoreError as exc:
                    results[i] = exc

        await asyncio.gather(*(create(indexes) for indexes in by_key.values()))
        return results

    @abc.abstractmethod
    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        """Replace the object only if its etag is still ``etag``; return the new etag.

        Raises PreconditionFailed on a mismatch. When the object is gone,
        raises NotFound, or PreconditionFailed where the provider answers so
        (Ceph RGW answers 412 where AWS answers 404): a caller takes either
        as "that version is no longer there" and reads again.
        """

    async def put_parts(
        self, key: str, parts: Parts, *, if_absent: bool = False, if_match: str | None = None
    ) -> str:
        """Write a body of several buffers (a record holding a large value,
        :mod:`stepstone.store.parts`) as ``put``, ``put_if_absent`` (with
        ``if_absent``) or ``put_if_match`` (with ``if_match``) would write them
        joined, with their errors. A store that can write the buffers where
        they lie does (FileStore, SqliteStore, S3Store); this default joins
        them."""
        data = parts.join()
        if if_absent:
            return await self.put_if_absent(key, data)
        if if_match is not None:
            return await self.put_if_match(key, data, if_match)
        return await self.put(key, data)

    async def get_split(self, key: str, splitter: Splitter) -> SplitObject:
        """The object read in three pieces, its large piece (where
        ``splitter`` finds one in its first bytes) in an allocation of its
        own, so that a large value comes out of its record without another
        copy. Raises NotFound. A store that can read the piece straight into
        its place does (FileStore, SqliteStore, S3Store); this default cuts
        what ``get`` read."""
        stored = await self.get(key)
        return split_in_memory(key, stored.data, stored.etag, splitter)

    @abc.abstractmethod
    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        """Delete the object.

        Without ``if_match`` a missing object is not an error (S3's semantics).
        With it, raises PreconditionFailed on a mismatch, and NotFound (or
        PreconditionFailed, as :meth:`put_if_match`) when the object is gone.
        """

    @abc.abstractmethod
    async def list(
        self,
        prefix: str = "",
        *,
        start_after: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
    ) -> list[ObjectInfo]:
        """One page of the objects whose keys start with ``prefix``, in key order
        (by UTF-8 bytes, as S3 orders them), after ``start_after`` if given,
        at most ``limit`` of them."""

    async def scan(
        self,
        prefix: str = "",
        *,
        start_after: str | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> AsyncIterator[ObjectInfo]:
        """Every object under ``prefix`` in key order, fetched a page at a time."""
        cursor = start_after
        while True:
            page = await self.list(prefix, start_after=cursor, limit=page_size)
            for info in page:
                yield info
            if len(page) < page_size:
                return
            cursor = page[-1].key

    async def open(self) -> None:  # noqa: B027 - a no-op default is the point
        """Get ready for requests now rather than on the first one (an S3
        client); a store that needs nothing does nothing. Optional (the
        first request does it otherwise) and repeatable."""

    async def close(self) -> None:  # noqa: B027 - a no-op default is the point
        """Release connections. The store must not be used afterwards."""

    async def __aenter__(self) -> ObjectStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.location}>"
