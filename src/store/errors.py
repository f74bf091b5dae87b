"""The errors every store backend raises, whatever is underneath; and the root
of all of stepstone's errors.

Callers catch these, never a botocore or OSError: the runtime decides what
to do from the class alone (retry an unavailable store, treat a failed
precondition as an answer), and a person reading the message learns the
store, the key and the cause without a traceback from three layers down.

``StepstoneError`` is defined here, in the lowest layer, so that every layer
above can derive its errors from it without importing upward. The whole tree
is drawn in :mod:`stepstone.errors`.
"""

from __future__ import annotations


class StepstoneError(Exception):
    """Base class of every error stepstone raises (see :mod:`stepstone.errors`)."""


class StoreError(StepstoneError):
    """Base class: something went wrong talking to an object store.

    ``location`` names the store (``s3://bucket/prefix``, ``file:///root``,
    ``memory://``), ``key`` the object when there is one.
    """

    def __init__(
        self,
        message: str,
        *,
        location: str = "",
        key: str | None = None,
    ) -> None:
        self.location = location
        self.key = key
        where = location + ("/" + key if key is not None and location else (key or ""))
        super().__init__(f"{message} ({where})" if where else message)
        self.message = message


class NotFound(StoreError):
    """The object does not exist."""


class PreconditionFailed(StoreError):
    """A conditional write or delete lost: the object's etag was not the one given.

    This is an answer, not a fault; it is never retried.
    """


class AlreadyExists(PreconditionFailed):
    """A create-if-absent found the object already there: another writer won."""


class StoreUnavailable(StoreError):
    """The store could not be reached or kept failing after bounded retries.

    Transient by nature: the same call may succeed later.
    """


class Throttled(StoreUnavailable):
    """The store kept answering that it was sent too much (503 SlowDown,
    429) after bounded retries: a partition of the bucket, or one object,
    is over its rate. Transient as any StoreUnavailable; told apart so that
    an object many processes write may wait longer for its turn
    (stepstone.limits.shared)."""


class StoreConfigError(StoreError):
    """The store is misconfigured: the bucket does not exist, the credentials
    are wrong or lack permission, the URL is malformed. Retrying will not help.
    """


class InvalidKey(StoreError, ValueError):
    """A key was refused before it reached the store: empty, too long, absolute,
    with a ``..`` segment or a control character."""
