"""Fenced deletes on a store whose DeleteObject ignores If-Match, and write tokens.

**Write tokens.** Every conditional write an S3Store sends carries a token
of its own in its metadata (``x-amz-meta-stepstone-write``), unique to the
writer and that write and the same for each of its tries. A write whose
try may have been applied (a timeout, a 5xx: Ceph RGW answers the loser
of an If-Match race 500) and is then refused is decided by the token the
object holds (one HEAD): ours, the write landed; another, it lost. Never
by equal bytes: two writers of the same bytes (a counter's next value) are
two writes, and the loser taking the winner's object for its own loses an
update.

**Husks.** (The store's own, never seen above it; no outcome tombstone.)
Where DeleteObject ignores If-Match (Ceph RGW 16, older
MinIO, several providers), a fenced delete of version ``E`` is done in two
requests: a compare-and-swap of ``E`` to a husk (an object marked by
its metadata, ``x-amz-meta-stepstone-husk``, with a body unique to
it), which holds the fence exactly as a swap does, then an unconditional
DELETE of the husk by the writer that placed it. Reads take a
husk for no object (NotFound), and nothing but its own writer removes
it; so what the DELETE can remove is that writer's own husk and
nothing else, provided nobody else has written the key meanwhile:

- nobody swaps over a husk (readers never see its etag), and a create
  that finds one waits for its writer to remove it (it does at once);
- a husk its writer did not remove (the process died between its two
  requests) is replaced by a create only once it has stood for
  :data:`STALE` seconds, by the server's clock (its age in the answer's
  ``Date`` less its ``Last-Modified``) or by the creator's own, whichever
  is longer, with a compare-and-swap on its etag (of two creators, one
  wins);
- a writer sends its DELETE only within :data:`GUARD` seconds of sending
  its swap, each try checked, and otherwise leaves the husk to a
  creator. A DELETE is so sent more than ``STALE - GUARD`` seconds before a
  creator can replace the husk: it would have to spend that long in
  flight, past the store's read timeout, to remove a newer object.

The cost, on such a store only: a fenced delete is a PUT and a DELETE (the
DELETE free on S3's price list, the PUT billed), and a create that loses
its race (a keyed submit's duplicate) reads the key once to tell a live
object from a husk. Measured in benchmarks/NOTES.md ("Stores without
a conditional delete").
"""

from __future__ import annotations

import secrets

WRITE_META = "stepstone-write"
"""The metadata name of a conditional write's token."""
HUSK_META = "stepstone-husk"
"""The metadata name that marks a husk."""
PROBES = "stepstone-probes/"
"""Where, under the store's prefix, an S3Store tries what its provider holds."""

GUARD = 10.0
"""Seconds after sending its swap within which a writer may still send the
DELETE of its husk."""
STALE = 60.0
"""Seconds a husk stands before a create may replace it."""
LOOK_AGAIN = (0.02, 0.5)
"""The first and the longest pause of a create waiting for a husk to go."""


def token() -> str:
    """A fresh write token."""
    return secrets.token_hex(8)


def husk_body(of: str) -> bytes:
    """A husk's bytes: unique to it (its etag fences the creates that replace it)."""
    return b"stepstone husk " + of.encode()
