"""What a listed record's size says, so that a StoreQueue need not read it.

A listing shows each key's etag, size and last-modified time, nothing of
what the record holds, and every record read is a GET. Sizes carry enough
to skip most of those reads:

- **A claim elsewhere.** Every claim of one version writes a record of one
  size (the same fields, a token of fixed length, a float lease). A record
  the cache held as waiting whose new size is exactly that was claimed by
  another process: the cache notes it as held, with a lease guessed from its
  own, and reads it only when that guess lapses. A short job is acked and
  gone from the listing before then, so this process never reads it at all.
  The guessed lease runs from the record's last change as listed (its
  last-modified time), never from when this process happened to look: a
  holder that died before this process listed the record has lapsed by
  then, and the next claim round takes the job over.
- **A renewal elsewhere.** A renewal rewrites the same fields with the same
  sizes; every other transition of a held record adds or drops the token,
  the lease or an error, or deletes the record. A held record whose size did
  not change is read when the lease it was seen with would have lapsed.
- **A place in line.** A record's size also says its priority (the padding
  of :mod:`stepstone.runtime.store_queue.records`), which with its last-modified time
  places it in the unread line (:mod:`stepstone.runtime.store_queue.read_line`).

A wrong guess (another change of the same size) only delays when this
process looks again: nothing is ever written from a guess (a claim of a
record not fully known reads it first), so it cannot hand a job to two
holders.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import replace

from stepstone.store.base import ObjectInfo

from ..queue import sort_key
from .record_cache import Seen
from .records import StoredJob, encode, listed_priority

_TOKEN_BYTES = 12
TOKEN_SHAPE = "0" * 2 * _TOKEN_BYTES
"""What every token looks like to the encoder (see :func:`held_elsewhere`)."""


_MARK_CHARS = 12
"""A token's first characters that name its holder, when it has one."""


def holder_mark(holder: str) -> str:
    """The start of every token ``holder`` claims with: a hash of it, so a
    restarted worker finds its own claims and reads no one's name."""
    return hashlib.sha256(holder.encode()).hexdigest()[:_MARK_CHARS]


def new_token(holder: str | None = None) -> str:
    """A claim's fencing token, always as long as TOKEN_SHAPE: random, after
    the holder's mark if there is a holder (half the token: 48 random bits
    still make every claim's token its own)."""
    if holder is None:
        return secrets.token_hex(_TOKEN_BYTES)
    return holder_mark(holder) + secrets.token_hex(_TOKEN_BYTES - _MARK_CHARS // 2)


def renewed_elsewhere(seen: Seen, info: ObjectInfo, now: float) -> bool:
    """Whether a listed change is most likely another holder renewing its
    lease, so reading it can wait until the lease it was seen with lapses."""
    job = seen.job
    return (
        job is not None
        and job.partial
        and job.token is not None
        and job.lease_expires_at is not None
        and job.lease_expires_at > now
        and info.size == seen.size
    )


def claimed_elsewhere(seen: Seen, info: ObjectInfo, now: float, lease: float) -> Seen | None:
    """If a listed change of a record the cache knew as waiting has exactly
    the size a claim of it would produce, someone claimed it: a placeholder
    saying so, to stand until about ``lease`` after that change, instead of
    reading it.

    The placeholder keeps no token of ours and no payload (``partial``), so
    nothing is ever written from it: a claim reads the record first.
    """
    job = seen.job
    if job is None or job.partial or job.dead or job.token is not None:
        return None
    guess = held_elsewhere(job, info.etag, changed_at(info, now), lease)
    return guess if guess.size == info.size else None


def guess_changed(seen: Seen, info: ObjectInfo, now: float, lease: float) -> Seen | None:
    """A placeholder whose record a listing shows changed, at the size it
    guessed: the same guess, under the listed etag, its lease timed again
    from that change (a renewal; or the claim itself, when the guess was
    made on a race lost to it, before any listing showed when it happened)."""
    job = seen.job
    if not seen.guessed or job is None or info.size != seen.size:
        return None
    retimed = replace(job, lease_expires_at=changed_at(info, now) + lease)
    return Seen(info.etag, retimed, seen.size, guessed=True)


def changed_at(info: ObjectInfo, now: float) -> float:
    """When a listed record last changed, by the store's clock, and never
    later than ``now``: a store clock ahead of ours must not push a guessed
    lease past the real one, which would only delay a takeover."""
    return min(info.modified, now)


def held_elsewhere(job: StoredJob, etag: str, since: float, lease: float) -> Seen:
    """A placeholder for a waiting record someone else claimed at ``since``:
    the size that claim wrote and a lease of ``lease`` seconds guessed from
    this instance's own. Never written; a claim reads first."""
    claimed = job.claimed(job.updated_at, token=TOKEN_SHAPE, lease_expires_at=since + lease)
    return Seen(etag, claimed.stripped(), len(encode(claimed)), guessed=True)


def listed_place(info: ObjectInfo, priority_aging: float) -> float:
    """A listed record's place in line (queue.sort_key), as well as the
    listing shows it: its last change for its run-at, its size for its
    priority."""
    return sort_key(info.modified, listed_priority(info.size), priority_aging)
