"""Job ids: what every backend can hold.

Ids become object keys (and, for SQS, message attributes), so they are kept
to a small alphabet: no escaping scheme to get wrong, and the keys sort in id
order, which is the order ``LeaseQueue.list`` pages in.
"""

from __future__ import annotations

import re

MAX_ID_LENGTH = 200
_ID = re.compile(r"[A-Za-z0-9._-]+")


def check_job_id(job_id: str) -> str:
    """Return ``job_id`` if every backend can hold it, else raise ValueError naming it.

    Ids become object keys (and SQS message attributes), so they are limited to
    ``[A-Za-z0-9._-]``, at most 200 characters, and not ``.`` or ``..``: no
    escaping scheme to get wrong, and the key order is the id order.
    """
    if (
        not isinstance(job_id, str)
        or len(job_id) > MAX_ID_LENGTH
        or not _ID.fullmatch(job_id)
        or job_id in (".", "..")
    ):
        raise ValueError(
            f"invalid job id {job_id!r}: use 1 to {MAX_ID_LENGTH} characters "
            "from A-Z a-z 0-9 . _ - (and not '.' or '..')"
        )
    return job_id
