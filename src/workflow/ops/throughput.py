"""Runs finished and failed over the last hour and the last day, counted from
the outcome records without reading a day's outcomes at every refresh.

When a run finished needs no read: its outcome object's last-modified time
in a listing (:mod:`stepstone.ops.finished`) says so. How it finished does:
a GET of the record. Outcome records do not change once written (a sweep's
tombstone or a new incarnation is a new version, with a new etag), so a
status read once is kept, by etag, in :class:`Statuses`, and each count reads
at most ``reads`` records it does not know yet, newest first: a view
watching a busy store reads each outcome once, a refresh only the runs that
finished since the last, and until it has read a day's backlog the charts
say how many of their runs it has not read yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from stepstone.ops.reads import Inspected, Unreadable, read_outcomes
from stepstone.runtime.status import JobStatus
from stepstone.store import ObjectInfo

HOUR, DAY = 3600.0, 86400.0


@dataclass(slots=True)
class Bucket:
    """One bar: the runs whose outcome was written in ``[start, start + width)``."""

    start: float
    width: float
    by_status: dict[str, int] = field(default_factory=dict)
    """Finished runs by status (``succeeded``, ``failed``, ``cancelled``)."""
    unread: int = 0
    """Runs whose outcome record is not read yet (their status unknown)."""

    @property
    def finished(self) -> int:
        return sum(self.by_status.values()) + self.unread


@dataclass(frozen=True, slots=True)
class Throughput:
    """The last hour by minute and the last day by hour."""

    hour: list[Bucket]
    day: list[Bucket]
    read: int
    """Outcome records read to make these."""
    unread: int
    """Outcome records of the last day still to read."""


class Statuses:
    """How each outcome record that was read ended, by its key and etag
    (None: a tombstone, or a record that would not decode: no run to count)."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[str, str | None]] = {}

    def get(self, info: ObjectInfo) -> tuple[bool, str | None]:
        """(True, status) when this version of the record was read."""
        known = self._known.get(info.key)
        if known is None or known[0] != info.etag:
            return False, None
        return True, known[1]

    def put(self, info: ObjectInfo, status: str | None) -> None:
        self._known[info.key] = (info.etag, status)

    def keep_only(self, keys: set[str]) -> None:
        """Forget the records no longer counted (older than a day, or gone)."""
        for key in self._known.keys() - keys:
            del self._known[key]


async def throughput(
    runner: Inspected,
    listed: Sequence[ObjectInfo],
    now: float,
    statuses: Statuses,
    *,
    reads: int,
) -> Throughput:
    """Count ``listed`` (the outcome objects, newest written first) into the
    last hour's minutes and the last day's hours, reading at most ``reads``
    records whose status ``statuses`` does not hold (see the module docstring)."""
    day = [info for info in listed if now - DAY <= info.modified <= now]
    statuses.keep_only({info.key for info in day})
    unknown = [info for info in day if not statuses.get(info)[0]][:reads]
    by_key = {info.key: info for info in unknown}
    found = await read_outcomes(runner, unknown)
    for record in found:
        if isinstance(record, Unreadable):
            statuses.put(by_key[record.key], None)
        else:
            statuses.put(by_key[runner.layout.outcome(record.run_id)], record.status.value)
    for info in unknown:  # gone since the listing, or a tombstone: no run to count
        if not statuses.get(info)[0]:
            statuses.put(info, None)
    hour = _buckets(now, HOUR, 60)
    days = _buckets(now, DAY, 24)
    unread = 0
    for info in day:
        known, status = statuses.get(info)
        unread += not known
        if known and status is None:
            continue
        for buckets, span in ((hour, HOUR), (days, DAY)):
            if info.modified < now - span:
                continue
            at = int((info.modified - buckets[0].start) // buckets[0].width)
            bucket = buckets[min(len(buckets) - 1, at)]
            if known and status is not None:
                bucket.by_status[status] = bucket.by_status.get(status, 0) + 1
            else:
                bucket.unread += 1
    return Throughput(hour, days, len(unknown), unread)


def _buckets(now: float, span: float, count: int) -> list[Bucket]:
    width = span / count
    return [Bucket(now - span + n * width, width) for n in range(count)]


FINISHED = tuple(status.value for status in JobStatus if status.finished)
"""The statuses a bar is made of, in the order they are stacked."""
