"""Priorities on SQS: one SQS queue per tier of priorities, polled by weight.

SQS has no priorities within a queue, so the ten priorities are grouped into
tiers (high 0-3, normal 4-6, low 7-9 by default), each its own SQS queue. A
claim looks first at the tier a smooth weighted round robin picks (4:2:1 by
default: over 7 claims high first 4 times, normal twice, low once), so a
steady stream of urgent work never starves the lower tiers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .limits import NAME


@dataclass(frozen=True, slots=True)
class Tier:
    """One SQS queue holding the priorities ``lowest..highest`` (inclusive)."""

    suffix: str
    lowest: int
    highest: int
    weight: int
    """Share of polls that look at this tier first; 4:2:1 means the high tier
    is polled first 4 times in 7, the low tier once, so none starves."""


DEFAULT_TIERS: tuple[Tier, ...] = (
    Tier("high", 0, 3, 4),
    Tier("normal", 4, 6, 2),
    Tier("low", 7, 9, 1),
)


def check_tiers(tiers: Sequence[Tier]) -> None:
    """Raise ValueError unless ``tiers`` cover 0..9 once each, in order."""
    covered: list[int] = []
    for tier in tiers:
        if tier.weight < 1 or not NAME.match(tier.suffix):
            raise ValueError(f"bad tier {tier!r}: weight >= 1 and a plain suffix needed")
        covered.extend(range(tier.lowest, tier.highest + 1))
    if sorted(covered) != list(range(10)):
        raise ValueError("tiers must cover priorities 0..9 exactly once, in order")
    if [t.lowest for t in tiers] != sorted(t.lowest for t in tiers):
        raise ValueError("tiers must be listed from the first priority to the last")


def tier_of(tiers: Sequence[Tier], priority: int) -> Tier:
    for tier in tiers:
        if tier.lowest <= priority <= tier.highest:
            return tier
    raise AssertionError("tiers cover 0..9")  # check_tiers guarantees it


class TierRotation:
    """Which tier each claim looks at first: smooth weighted round robin."""

    def __init__(self, tiers: Sequence[Tier]) -> None:
        self._weights = [t.weight for t in tiers]
        self._credit = [0] * len(self._weights)

    def next_order(self) -> list[int]:
        """Tier indexes for one claim: the first by weight, then the rest in
        priority order."""
        total = sum(self._weights)
        for i, weight in enumerate(self._weights):
            self._credit[i] += weight
        first = max(range(len(self._weights)), key=lambda i: self._credit[i])
        self._credit[first] -= total
        return [first] + [i for i in range(len(self._weights)) if i != first]
