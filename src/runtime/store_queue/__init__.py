"""StoreQueue: the lease queue over any ObjectStore, shared by many processes.

Each job is one object, ``<prefix>/jobs/<id>``, and every change after the
create is a compare-and-swap on its etag, so two processes that race for a
job cannot both win. Requests are what S3 bills, so each instance keeps a
cache of the records it wrote or read, lists the prefix only as claims need
it, and reads what a listing showed changed only as claims need that, in the
order the listing suggests. docs/queue.md tabulates the requests and
explains each choice.

One module per part, each with the reason it is so:

- ``queue``: :class:`StoreQueue` itself, which holds an instance's parts and
  hands each operation of the contract and the capabilities to one of them.
- ``records``: a job's record, its codec, and the padding that makes a
  record's size say its priority.
- ``record_io``: reading and writing one record, so every read is counted,
  every version learnt by the cache, and a lost answer resolved.
- ``record_cache``: what one instance knows of the records, and which are due.
- ``discovery``: listing the prefix and reading what it showed, as claims
  need them.
- ``pacing``: when to list again, how much to read, how widely to pick.
- ``doorbell``: the object enqueues rewrite, so idle claimers on a bucket
  learn of new work with a HEAD rather than a LIST.
- ``size_hints``: what a listed size says, so the record need not be read.
- ``read_line``: the order records a listing showed are read in.
- ``creates``: enqueues, a batch of creates in one request, and a create
  whose answer was lost.
- ``claims``: the claim race, a compare-and-swap per record against others.
- ``transitions``: the changes a claim's token makes (renew, the
  settlements) and wakes, each a compare-and-swap.
- ``reclaims``: a restarted worker's runs, taken back by the marks its
  claims' tokens carry.
- ``admin``: cancel, withdraw, discard and requeue, outside any claim.
- ``inspection``: one record, listings and counts, for people.
- ``lost_answers``: whether a write whose answer was lost happened.
"""

from .queue import StoreQueue
from .record_io import StoreQueueStats
from .records import CorruptRecord

__all__ = ["CorruptRecord", "StoreQueue", "StoreQueueStats"]
