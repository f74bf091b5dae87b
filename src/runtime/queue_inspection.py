"""Deprecated: the inspection capabilities live in :mod:`stepstone.runtime.capabilities`.

Kept so that code written against the old name (docs/queue.md named it)
keeps working; importing it warns.
"""

from __future__ import annotations

import warnings

from .capabilities import DeadJobRequeue, JobCounts, JobListing, Page, QueueInspection

__all__ = ["DeadJobRequeue", "JobCounts", "JobListing", "Page", "QueueInspection"]

warnings.warn(
    "stepstone.runtime.queue_inspection is deprecated; import from stepstone.runtime.capabilities",
    DeprecationWarning,
    stacklevel=2,
)
