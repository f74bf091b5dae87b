"""SubmitOptions: what a caller may set for one submission, checked once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

RESERVED_HEADER_PREFIX = "stepstone."


@dataclass(frozen=True, slots=True)
class SubmitOptions:
    """Per-submission overrides; every field defaults to the runner's setting."""

    priority: int | None = None
    """0 (first) to 9 (last); the queue's default when None."""
    run_at: datetime | None = None
    """Not before this time (an aware datetime)."""
    max_attempts: int | None = None
    """Overrides the job type's and the runner's max_attempts."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Metadata carried to ``ctx.headers``; keys starting ``stepstone.`` are reserved."""
    attributes: Mapping[str, str] = field(default_factory=dict)
    """What the run is found by later (``runner.runs(attributes=...)``,
    ``stepstone ls --attr``): names and values, checked by
    :func:`stepstone.records.attributes.check_attributes`."""


def headers_of(options: SubmitOptions) -> dict[str, str]:
    """The headers to carry; ValueError for one under the reserved prefix."""
    headers = dict(options.headers)
    for header in headers:
        if header.startswith(RESERVED_HEADER_PREFIX):
            raise ValueError(
                f"header {header!r}: the {RESERVED_HEADER_PREFIX!r} prefix is reserved"
            )
    return headers


def run_at_of(options: SubmitOptions) -> float | None:
    """The run-at time as epoch seconds; ValueError for a naive datetime."""
    if options.run_at is None:
        return None
    if options.run_at.tzinfo is None:
        raise ValueError("SubmitOptions.run_at must be an aware datetime (with a tzinfo)")
    return options.run_at.timestamp()
