"""StoreQueue: the lease queue over any ObjectStore, shared by many processes.

Each job is one object, ``<prefix>/jobs/<id>``, and every change after the
create is a compare-and-swap on its etag, so two processes that race for a
job cannot both win. Requests are what S3 bills, so each instance keeps a
view of the records it wrote or read, lists the prefix only as claims need
it, and reads what a listing showed changed only as claims need that, in the
order the listing suggests. docs/queue.md tabulates the requests and
explains each choice.

One module per part, each with the reason it is so:

- ``contract``: :class:`StoreQueue` itself, the LeaseQueue contract's
  operations and the inspection ones.
- ``records``: a job's record, its codec, and the padding that makes a
  record's size say its priority.
- ``view``: what one instance knows of the records, and which are due.
- ``pacing``: when to list again, how much to read, how widely to pick.
- ``size_hints``: what a listed size says, so the record need not be read.
- ``read_line``: the order records a listing showed are read in.
- ``lost_answers``: whether a write whose answer was lost happened.
"""

from .contract import StoreQueue, StoreQueueStats
from .records import CorruptRecord

__all__ = ["CorruptRecord", "StoreQueue", "StoreQueueStats"]
