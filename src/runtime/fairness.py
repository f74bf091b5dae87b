"""Fairness between tenants: which fairness key is served next.

A job may carry a **fairness key** (a tenant, a customer, a source) and a
**weight** in two reserved headers of its enqueue
(:data:`FAIRNESS_KEY_HEADER`, :data:`FAIRNESS_WEIGHT_HEADER`): the queue
contract gains no argument, and every backend keeps them with the record as
it keeps any header. Jobs without a key share one key, ``""``.

The rule, which every backend that orders its own claims keeps
(MemoryQueue exactly; a StoreQueue among the jobs one process knows): the
line decides the priority served (the job first by
:func:`stepstone.runtime.queue.sort_key`, so priorities and aging work as
before); among the due jobs of that priority, the keys are served round-robin, and the
key served next gives its first job in line.

The round-robin is stride scheduling: each key has a **pass**; the key with the
lowest pass (a key never seen, or idle long, counts at the current pass
``V``, never below it) goes next, ties going to the key served longest ago
(a new key first), and each claim moves its key's pass on by
``1 / weight``. So every key's pass stays within ``1 / weight`` of ``V``:
over any stretch of claims in which keys X and Y both had due jobs,
``claims(X) / weight(X)`` and ``claims(Y) / weight(Y)`` differ by at most
``1 / weight(X) + 1 / weight(Y)``; with equal weights the keys alternate
strictly. A key that went idle comes back where it left off, never ahead.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from fractions import Fraction

FAIRNESS_KEY_HEADER = "stepstone.fairness_key"
"""The reserved header a job's fairness key travels in."""
FAIRNESS_WEIGHT_HEADER = "stepstone.fairness_weight"
"""The reserved header a fairness key's weight travels in (absent: 1)."""
FAIRNESS_HEADERS = frozenset({FAIRNESS_KEY_HEADER, FAIRNESS_WEIGHT_HEADER})
"""Both, for a record that keeps only what orders its claim."""
MAX_WEIGHT = 1000
"""The largest weight a fairness key may have (1 is the least and the default)."""
FAIRNESS_BUCKETS = 32
"""How many classes a queue record's size can say (a StoreQueue's): class 0
is no fairness key, 1 to 30 the keys (:func:`bucket_of`), and the last a
held record's, whatever its key (so that a held record and one given back
never have one size)."""

_KEY = re.compile(r"[!-~]{1,128}")
"""What a fairness key may be: 1 to 128 printable ASCII characters, no
space (what SQS takes as a message group id, and safe on a terminal)."""

_PRUNE_AT = 10_000
"""Keys remembered before those behind the current pass are forgotten."""


def check_fairness(key: str | None, weight: int | None) -> None:
    """Raise ValueError for a key or weight a submit may not carry."""
    if key is None:
        if weight is not None:
            raise ValueError("fairness_weight needs a fairness_key")
        return
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise ValueError(
            f"fairness_key must be 1 to 128 printable ASCII characters without spaces, got {key!r}"
        )
    if weight is not None and (
        not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= MAX_WEIGHT
    ):
        raise ValueError(f"fairness_weight must be an int from 1 to {MAX_WEIGHT}, got {weight!r}")


def fairness_headers(key: str | None, weight: int | None) -> dict[str, str]:
    """The headers that carry ``key`` and ``weight`` (checked first)."""
    check_fairness(key, weight)
    if key is None:
        return {}
    out = {FAIRNESS_KEY_HEADER: key}
    if weight is not None and weight != 1:
        out[FAIRNESS_WEIGHT_HEADER] = str(weight)
    return out


def fairness_of(headers: Mapping[str, str]) -> tuple[str, int]:
    """A job's fairness key (``""`` for none) and weight, from its headers.
    A stored value no submit could have written (another writer, a damaged
    record) counts as no key, or weight 1: it only orders claims."""
    key = headers.get(FAIRNESS_KEY_HEADER, "")
    if key and not _KEY.fullmatch(key):
        key = ""
    text = headers.get(FAIRNESS_WEIGHT_HEADER)
    weight = 1
    if key and text is not None and text.isdigit() and len(text) <= 4:
        weight = min(max(int(text), 1), MAX_WEIGHT)
    return key, weight


@functools.lru_cache(maxsize=4096)
def bucket_of(key: str) -> int:
    """The class (0 to FAIRNESS_BUCKETS - 2) a listing shows a waiting job
    of ``key`` by: 0 for no key, else one of the others by a hash of it."""
    if not key:
        return 0
    digest = hashlib.blake2b(key.encode(), digest_size=4).digest()
    return 1 + int.from_bytes(digest, "big") % (FAIRNESS_BUCKETS - 2)


Pass = int | Fraction
"""A key's pass: exact, a whole number while every weight is 1 (the common
case, which then costs no Fraction arithmetic)."""


class FairShares:
    """The fairness keys' shares of the claims in one claimer: see the module docstring.

    :meth:`order` says who goes next among keys with due jobs, without
    changing anything; :meth:`served` records a claim."""

    def __init__(self) -> None:
        self._pass: dict[str, Pass] = {}
        self._last: dict[str, int] = {}
        self._now: Pass = 0
        """``V``: the pass of the last key served, before its claim moved it."""
        self._claims = 0

    @property
    def current(self) -> Pass:
        """``V``, the pass every key is counted at least at."""
        return self._now

    def standing(self, key: str) -> tuple[Pass, int]:
        """``key``'s place in the round-robin: its pass (at least ``V``), then
        when it was last served (0: never); the lowest goes first."""
        return max(self._pass.get(key, self._now), self._now), self._last.get(key, 0)

    def served(self, key: str, weight: int = 1) -> None:
        """Record a claim of one of ``key``'s jobs."""
        start = self.standing(key)[0]
        self._now = start
        self._pass[key] = start + (1 if weight <= 1 else Fraction(1, weight))
        self._claims += 1
        self._last[key] = self._claims
        if len(self._pass) > _PRUNE_AT:
            for gone in [k for k, p in self._pass.items() if p < self._now]:
                del self._pass[gone]
                self._last.pop(gone, None)

    def copy(self) -> FairShares:
        """An independent copy, to look ahead at the next several claims."""
        other = FairShares()
        other._pass = dict(self._pass)
        other._last = dict(self._last)
        other._now = self._now
        other._claims = self._claims
        return other
