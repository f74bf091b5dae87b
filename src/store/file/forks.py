"""A fork counter: how an object notices it now lives in a forked child.

A FileStore keeps threads and private spare inodes. A child forked from a
process that used the store (a preloading server, multiprocessing's fork)
inherits the objects but not their threads, and must not rewrite inodes its
parent may be rewriting at that moment. So an object remembers ``forks()``
when it sets up and compares on use: a counter bumped after every fork costs
nothing per operation, where a ``getpid`` would be a system call.
"""

from __future__ import annotations

import os

_forks = 0


def _count_fork() -> None:
    global _forks
    _forks += 1


os.register_at_fork(after_in_child=_count_fork)


def forks() -> int:
    """How many forks lie between this process and the one this module was
    imported in: an object that remembers the value notices it now lives in
    a forked child without a ``getpid`` system call on every use."""
    return _forks
