"""SqsQueue: the lease queue on Amazon SQS, for fleets that outgrow polling a bucket.

Memos and outcome records stay on S3 (the workflow layer writes them); only
the queue moves. The mapping onto SQS, and why (docs/scaling.md has the long
form), with the module that holds each part:

- **Lease = visibility timeout.** A claim is a ReceiveMessage with
  ``VisibilityTimeout`` = the lease; renew is ChangeMessageVisibility; a
  lease that lapses makes the message visible again and the next receive is
  the takeover, counted as a lapse. (``queue``, the class, hands each operation to a part:
  ``enqueues``, ``receiving`` for claims, ``transitions`` for renewals and
  settlements, ``admin`` for cancel and requeue, ``inspection`` for get and
  counts.)
- **Token = receipt handle, plus a local fence.** SQS accepts a stale
  receipt handle, so this process fences each delivery on the lease deadline
  it measured itself and on the newest handle it saw for the message; past
  either, every transition answers LOST without calling SQS. What remains is
  at-least-once delivery, which the workflow layer's first-writer-wins
  outcome records and memos make harmless. (``fence``, and ``holds``, which
  adds the id store's marker to the fence's answer)
- **Attempts and lapses = a carried base + ApproximateReceiveCount.** Every
  settlement but an ack (a retry, a release, a suspension, a message put
  back because it came early or is of an unwanted kind) re-sends the job as
  a new message, with its attempt base as it must stand, and deletes the
  received copy; so a message is received again only when the lease of its
  last receive lapsed. A delivery's attempt is the base plus one, and its
  lapses the carried ones plus the receives before it. The bases travel in
  the message body. (``message``, the body and its codec)
- **Delays = DelaySeconds, capped at 15 minutes.** A run-at or backoff further
  out is sent with the cap; when the message arrives early it is re-sent with
  the remaining delay (re-deferred) instead of delivered. (``limits`` has
  SQS's numbers.)
- **Dead = a dead-letter queue.** ``dead_letter`` sends the message there with
  the reason in the body; the tier queues also carry a RedrivePolicy as a
  last-resort net. ``requeue(id)`` has to scan the dead-letter queue: SQS
  cannot find a message by id. (``dead_letters``)
- **Priorities = one SQS queue per tier**, polled by weight (4:2:1 by default)
  so lower tiers are never starved (``tiers``); long polling only when
  every tier came back empty, and what a long poll brings after its claim
  returned is kept for the next (``prefetch``).
- **Ids live in an id store, or in this process only.** SQS standard queues
  do not deduplicate. With ``id_store`` (an ObjectStore: the bucket) each job
  has a create-if-absent marker, so dedup by id, ``get``, ``cancel`` and
  dropping SQS's duplicate deliveries work fleet-wide (``markers``);
  without it they work within this process only (``local_jobs``). The
  marker also holds the payload, so a payload over ``spill_bytes`` is left out
  of the message (kept on S3, read back by the claim's marker check at no
  extra request).
- **Requests are batched.** Sends and deletes wait a few milliseconds to go
  out ten to a request (``outbox``, over ``batcher``), through one client
  that counts every request (``client``).
- **What SQS cannot do is left out or refused, not faked.** There is no
  ``list`` (the queue is no :class:`stepstone.runtime.capabilities.JobListing`);
  ``get`` is exact for jobs this process holds and says "live"
  (READY/SCHEDULED) or DEAD from the marker for the rest (or raises
  :class:`SqsUnsupported`, without an id store, for jobs this process never
  saw); ``counts`` is SQS's approximate numbers; ``next_due`` is None.

aiobotocore is imported when the first request is made, so importing
``stepstone.runtime`` stays cheap for users who never touch SQS.
"""

from .inspection import SqsUnsupported
from .message import MalformedMessage
from .queue import SqsQueue
from .tiers import DEFAULT_TIERS, Tier

__all__ = ["DEFAULT_TIERS", "MalformedMessage", "SqsQueue", "SqsUnsupported", "Tier"]
