"""Run ids: what every backend can hold.

A run id becomes an object key (and, for SQS, a message attribute), so it is
kept to a small alphabet: no escaping scheme to get wrong, and the keys sort
in id order, which is the order ``JobListing.list`` pages in
(:mod:`stepstone.runtime.capabilities`).
"""

from __future__ import annotations

import re

MAX_ID_LENGTH = 200
_ID = re.compile(r"[A-Za-z0-9._-]+")


def check_storable_id(run_id: str) -> str:
    """Return ``run_id`` if every backend can hold it, else raise ValueError naming it.

    Ids become object keys (and SQS message attributes), so they are limited to
    ``[A-Za-z0-9._-]``, at most 200 characters, and not ``.`` or ``..``: no
    escaping scheme to get wrong, and the key order is the id order.
    """
    if not is_storable_id(run_id):
        raise ValueError(
            f"invalid run id {run_id!r}: use 1 to {MAX_ID_LENGTH} characters "
            "from A-Z a-z 0-9 . _ - (and not '.' or '..')"
        )
    return run_id


def is_storable_id(run_id: object) -> bool:
    """Whether ``run_id`` could name a run (a lookup of one that cannot finds nothing)."""
    return (
        isinstance(run_id, str)
        and len(run_id) <= MAX_ID_LENGTH
        and _ID.fullmatch(run_id) is not None
        and run_id not in (".", "..")
    )
