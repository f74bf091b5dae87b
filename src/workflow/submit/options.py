"""SubmitOptions: what a caller may set for one submission, checked once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from stepstone.runtime.fairness import fairness_headers

RESERVED_HEADER_PREFIX = "stepstone."


@dataclass(frozen=True, slots=True)
class Debounce:
    """Collapse submits of one job type under one key into one run.

    Submits with the same ``key`` (and job type) that come within ``wait``
    seconds of each other make one run, which starts ``wait`` seconds after
    the last of them (never later than ``max_wait`` seconds after the first,
    when given) with the last one's input; every one of their handles
    answers with that run's outcome. A submit after the run started makes a
    new run. See docs/concepts.md, "Debounce"."""

    key: str
    """What groups submits (a user id, a document id); any text."""
    wait: float
    """Seconds of quiet after the last submit before the run starts."""
    max_wait: float | None = None
    """Seconds after the first submit by which the run starts, however
    often submits keep coming (None: no such bound)."""

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"Debounce.key must be a non-empty str, got {self.key!r}")
        for name in ("wait", "max_wait"):
            value = getattr(self, name)
            if value is None and name == "max_wait":
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 < value <= MAX_DEBOUNCE
            ):
                raise ValueError(
                    f"Debounce.{name} must be seconds in (0, {MAX_DEBOUNCE:.0f}], got {value!r}"
                )


MAX_DEBOUNCE = 30 * 86_400.0
"""The longest ``wait`` or ``max_wait`` a Debounce takes (30 days)."""


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
    debounce: Debounce | None = None
    """Collapse this submit with others of its key into one run (see
    :class:`Debounce`); not with ``run_at``, nor for a job with an
    idempotency key or a child."""
    fairness_key: str | None = None
    """The tenant (a customer, a source) the run is claimed fairly for:
    among ready runs of one priority, claims go round-robin across fairness
    keys, so one key's backlog does not hold another's runs back
    (docs/concepts.md, "Fairness between tenants"). 1 to 128 printable
    ASCII characters without spaces. None: the runs without a key, which
    are served as one key."""
    fairness_weight: int | None = None
    """The key's share of the claims, 1 (the default) to 1000: a key of
    weight 3 gets three claims for every one of a key of weight 1 while both
    have runs ready. Needs ``fairness_key``."""


def headers_of(options: SubmitOptions) -> dict[str, str]:
    """The headers to carry, with the fairness key's; ValueError for a
    header under the reserved prefix, or a bad fairness key or weight."""
    headers = dict(options.headers)
    for header in headers:
        if header.startswith(RESERVED_HEADER_PREFIX):
            raise ValueError(
                f"header {header!r}: the {RESERVED_HEADER_PREFIX!r} prefix is reserved"
            )
    headers.update(fairness_headers(options.fairness_key, options.fairness_weight))
    return headers


def run_at_of(options: SubmitOptions) -> float | None:
    """The run-at time as epoch seconds; ValueError for a naive datetime."""
    if options.run_at is None:
        return None
    if options.run_at.tzinfo is None:
        raise ValueError("SubmitOptions.run_at must be an aware datetime (with a tzinfo)")
    return options.run_at.timestamp()
