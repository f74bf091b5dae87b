"""SqliteStore: the contract in one SQLite file, durable and shared by the
processes of one machine.

SQLite does what a local store needs, tested by its maintainers on every
platform: atomic transactions, recovery after a crash or a power cut, one
writer at a time across processes with readers beside it (WAL mode), an
ordered index. This package puts the contract on top and keeps the event
loop free:

- ``database``: the file's connections, WAL mode, durability
  (``synchronous``), the wait for the write lock, the schema and its mark,
  SQLite's errors as the store's;
- ``calls``: calls queued from the event loop and served in batches on a
  thread, a batch of writes in one transaction;
- ``objects``: each operation as statements, its condition in the one that
  writes; large objects in pieces;
- ``notices``: a commit that placed an object sets the file's times, and
  watchers on this machine (inotify) look for what changed under their
  prefix, so an idle worker hears of a job at once;
- ``store``: the class.
"""

from .store import SqliteStore

__all__ = ["SqliteStore"]
