"""What a worker counts: :class:`WorkerStats`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class WorkerStats:
    """Counters for tests, benchmarks and health checks."""

    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead: int = 0
    released: int = 0
    suspended: int = 0
    """Settlements that gave a suspended job back to wait (uncounted)."""
    lost: int = 0
    """Settlements (or renewals) that found the job no longer ours."""
    cancelled: int = 0
    """Attempts stopped because their job was cancelled."""
    queue_errors: int = 0
    """Queue calls (claim, renew, settle, next_due) that raised."""
    peak_in_flight: int = 0
