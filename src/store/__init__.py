"""Object storage for the engine: one async contract, three backends.

>>> from store import open_store
>>> store = open_store("memory://")
"""

from .base import DEFAULT_PAGE_SIZE, ObjectInfo, ObjectStore, StoredObject
from .errors import (
    AlreadyExists,
    InvalidKey,
    NotFound,
    PreconditionFailed,
    StoreConfigError,
    StoreError,
    StoreUnavailable,
)
from .file import FileStore
from .keys import validate_key
from .memory import MemoryStore

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "AlreadyExists",
    "FileStore",
    "InvalidKey",
    "MemoryStore",
    "NotFound",
    "ObjectInfo",
    "ObjectStore",
    "PreconditionFailed",
    "StoreConfigError",
    "StoreError",
    "StoreUnavailable",
    "StoredObject",
    "validate_key",
]
