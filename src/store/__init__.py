"""Object storage for the engine: one async contract, four backends.

``S3Store`` is imported on first use (aiobotocore is heavy), so ``import stepstone.store``
stays fast for code that only needs files or memory.

>>> from stepstone.store import open_store
>>> store = open_store("memory://")
"""

from typing import TYPE_CHECKING, Any

from .base import DEFAULT_PAGE_SIZE, NewObject, ObjectInfo, ObjectStore, StoredObject
from .counting import CountingStore
from .doubles import FaultyStore
from .errors import (
    AlreadyExists,
    InvalidKey,
    NotFound,
    PreconditionFailed,
    StepstoneError,
    StoreConfigError,
    StoreError,
    StoreUnavailable,
    Throttled,
)
from .file import FileStore
from .keys import validate_key
from .memory import MemoryStore
from .retry import RetryPolicy
from .sqlite import SqliteStore
from .url import open_store

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "AlreadyExists",
    "CountingStore",
    "FaultyStore",
    "FileStore",
    "InvalidKey",
    "MemoryStore",
    "NewObject",
    "NotFound",
    "ObjectInfo",
    "ObjectStore",
    "PreconditionFailed",
    "RetryPolicy",
    "S3Store",
    "SqliteStore",
    "StepstoneError",
    "StoreConfigError",
    "StoreError",
    "StoreUnavailable",
    "StoredObject",
    "Throttled",
    "open_store",
    "validate_key",
]

if TYPE_CHECKING:
    from .s3 import S3Store


def __getattr__(name: str) -> Any:
    if name == "S3Store":
        from .s3 import S3Store

        return S3Store
    raise AttributeError(f"module 'stepstone.store' has no attribute {name!r}")
