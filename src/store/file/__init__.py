"""FileStore: the contract on a local directory, one file an object.

Its one job is to be a store you can look into with ``ls`` and ``cat``: a
bucket's prefix copied into a directory (``aws s3 sync``, ``stepstone copy``)
opens as a store that ``stepstone ls``, ``show`` and ``ui`` read offline, and
it is a simple local store for tests. (A durable local store for workers is
a SQLite file: :mod:`stepstone.store.sqlite`.) It writes plainly, and is
durable and safe across processes:

- **Durable when a write returns** (``writes``): the bytes go to a temp
  file, flushed, which is moved into place; then the directory is flushed.
  A crash leaves the old object or the new one, never a torn one.
- **Conditional writes hold across processes** (``locks``): a write's
  condition is checked and applied under an exclusive ``flock`` on one of a
  fixed set of lock files (striped by a hash of the key); a create is a
  ``link``, which fails if the name is taken, atomically.
- **Etags come from ``stat`` alone** (``stats``): inode, mtime in ns, size,
  so listing (``listing``) never reads a file; the writer sets each file's
  mtime strictly after the one it replaces, so an etag never comes back.
- **Reads take no lock** (``reads``): a file never changes once it is an
  object, so one descriptor reads one object's bytes.
- **Nothing lands outside the root** (``paths``): keys are validated, the
  reserved temp directory cannot be named by one, and every path is checked
  to be under the root after normalisation and, for writes, after resolving
  symlinks. A symlink at a key is not an object (``stats``).
- **Notices** (``notices``): workers on this machine hear of new objects
  at once (inotify).
- **The class** (``store``): each call's file I/O on the event loop's
  thread pool.

A filesystem cannot hold both a file ``a`` and a directory ``a``, so the keys
``a`` and ``a/b`` cannot coexist here as they can on S3; the second one is
refused with InvalidKey (``os_errors``). The engine's key layout never does
this.
"""

from .store import FileStore

__all__ = ["FileStore"]
