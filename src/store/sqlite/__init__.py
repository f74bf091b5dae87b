"""SqliteStore: the contract in one SQLite file, durable and shared by the
processes of one machine.

SQLite does what a local store needs, tested by its maintainers on every
platform: atomic transactions, recovery after a crash or a power cut, one
writer at a time across processes with readers beside it (WAL mode), an
ordered index. What this package adds is the contract on top, and the
event loop kept free:

- **The file, its mode and durability** (``connection``): WAL mode, a
  commit synced to the disk before a write returns (``synchronous``),
  ``BEGIN IMMEDIATE`` with a bounded wait for the write lock, the schema
  and its mark, and SQLite's errors as the store's.
- **Batches** (``batches``): requests queue, and one thread at a time
  serves all that are queued, writes in one transaction and one commit,
  reads in one read transaction, waking the event loop once per batch.
- **Writes** (``writes``): each condition checked inside the transaction
  that applies it, so create-if-absent, compare-and-swap and the
  conditional delete hold across processes; a new row, and so a new etag,
  on every write; a large object kept in pieces, written as it is cut.
- **Reads** (``reads``): gets, listings in key order (the key's index), a
  large object's pieces read one at a time into their place.
- **Notices** (``notices``): a commit that placed an object sets the file's
  times, and watchers on this machine (inotify) look for what changed under
  their prefix, so an idle worker hears of a job at once.
- **The class** (``store``): the two batchers, a small thread pool and
  its connections, and a fork's child starting afresh.
"""

from .store import SqliteStore

__all__ = ["SqliteStore"]
