"""FileStore: the contract on a local directory, durable and safe across processes.

Why it is built the way it is, and where each part lives:

- **Durable when a write returns** (``commit``, ``temp_files``, ``flush``).
  Bytes go to a temp file in ``<root>/.stepstone-tmp/`` (same filesystem, so
  a rename is atomic), which is made durable, moved into place with
  ``rename`` (or ``link`` for create-if-absent, which fails with EEXIST
  atomically), and then the new name is made durable. A crash leaves either
  the old object or the new one, never a torn one.
- **Durability is group-committed** (``batches``): writes queue, and one
  thread commits everything queued as a batch. On Linux both "made durable"
  steps are then one ``syncfs`` of the store's filesystem for the whole
  batch, so N concurrent writes cost two flushes, not 2N fsyncs, and a
  flush costs about as much for one file as for many. Elsewhere, or with
  ``sync="fsync"``, each temp file is fsynced and each directory touched by
  the batch is fsynced once.
- **Creates can be durable with one flush** (``journal``, ``creates``,
  ``recovery``): ``put_many_if_absent`` writes each object's key and bytes
  into this process's journal, flushes that one file with ``fdatasync``,
  then links the objects into place and answers; the next flush of the
  filesystem retires the entries. After a power cut, the next store opened
  on the root writes back from a dead process's journal what the disk lost;
  a caller says what that should be for an object it may have deleted since
  (``RecoverableObject``).
- **Conditional writes hold across processes** (``locks``). Every mutation
  of a key runs under an exclusive ``flock`` on one of a fixed set of lock
  files (striped by a hash of the key), so a compare-and-swap in one process
  cannot interleave with a write from another. ``flock`` on separately
  opened files also excludes threads of the same process.
- **Etags come from ``stat`` alone** (``stats``): inode, mtime in ns, size,
  so listing (``listing``) never reads a file. To make an etag change on
  every write even when the filesystem reuses an inode and the kernel's
  timestamps are coarse, the writer sets the mtime itself from
  ``time.time_ns()``, strictly after the replaced file's mtime, while
  holding the key's lock.
- **Inodes are recycled** (``spares``): a deleted or replaced object's
  inode is kept and rewritten as a later object instead of being freed,
  because freeing and allocating inodes at a high rate is what a busy store
  on ext4 without a journal spends most of its CPU on. Reads (``reads``)
  check that the file they read was the object throughout, so recycling
  cannot show them another object's bytes.
- **Blocking I/O runs on a small thread pool** (``store``, the FileStore
  class itself: reads, listing, and the one committing thread), so the event
  loop never waits on the disk. A store used before a fork (``forks``)
  starts afresh in the child.
- **A busy store commits in a helper process** (``commit_process``): the
  committing thread's system calls each hand the interpreter lock back and
  forth with the event loop, so once a store is busy and a CPU sits idle,
  its batches go over a pipe to a child process running the same commit.
- **Nothing lands outside the root** (``paths``). Keys are validated (no
  ``..``, no absolute paths), the reserved temp directory cannot be named by
  a key, and every path is checked to be under the root after normalisation
  (and, for writes, after resolving symlinks). A symlink at a key is not an
  object (``stats``), and the store's own directories and lock files are
  never symlinks (``paths``, ``locks``).

A filesystem cannot hold both a file ``a`` and a directory ``a``, so the keys
``a`` and ``a/b`` cannot coexist here as they can on S3; the second one is
refused with InvalidKey (``os_errors``). The engine's key layout never does
this.
"""

from .creates import RecoverableObject
from .store import FileStore, SyncMode

__all__ = ["FileStore", "RecoverableObject", "SyncMode"]
