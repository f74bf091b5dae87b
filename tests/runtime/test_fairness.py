"""The round-robin rule between fairness keys, under random interleavings of
tenants' submits and claims, on the queues that order their own claims.

The rule (stepstone.runtime.fairness): over any stretch of claims during
which keys X and Y both had ready jobs at every claim, ``claims(X) / w(X)``
and ``claims(Y) / w(Y)`` differ by at most ``1 / w(X) + 1 / w(Y)``; with
equal weights, between two claims of X every other key ready throughout got
one; and each key's own jobs go in line order.
"""

from __future__ import annotations

import asyncio
import itertools
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepstone.runtime import FakeClock, LeaseQueue, MemoryQueue
from stepstone.runtime.fairness import (
    FairShares,
    bucket_of,
    check_fairness,
    fairness_headers,
    fairness_of,
)
from stepstone.runtime.store_queue import StoreQueue
from stepstone.store import MemoryStore

KEYS = ["t-a", "t-b", "t-c", "t-d"]

_op = st.one_of(
    st.tuples(st.just("submit"), st.sampled_from(KEYS), st.integers(1, 12)),
    st.tuples(st.just("claim"), st.integers(1, 4)),
)


def make(kind: str, clock: FakeClock) -> LeaseQueue:
    if kind == "memory":
        return MemoryQueue(clock=clock)
    return StoreQueue(MemoryStore(), clock=clock, scan_interval=0.0)


async def play(
    kind: str, weights: dict[str, int], ops: list[tuple[object, ...]]
) -> list[tuple[str, set[str]]]:
    """Carry out ``ops``; returns each claim's key, with the keys that had
    ready jobs just before it."""
    clock = FakeClock()
    queue = make(kind, clock)
    serial = itertools.count()
    ready: dict[str, list[str]] = {key: [] for key in KEYS}
    claims: list[tuple[str, set[str]]] = []
    for op in ops:
        clock.advance(0.001)
        if op[0] == "submit":
            _, key, count = op
            assert isinstance(key, str) and isinstance(count, int)
            for _ in range(count):
                run_id = f"{key}-{next(serial):04}"
                await queue.enqueue(b"", id=run_id, headers=fairness_headers(key, weights[key]))
                ready[key].append(run_id)
            continue
        assert isinstance(op[1], int)
        for _ in range(op[1]):
            backlogged = {key for key, ids in ready.items() if ids}
            got = await queue.claim(1, lease=60)
            if not backlogged:
                assert got == []
                break
            [delivery] = got
            key = delivery.id.rsplit("-", 1)[0]
            assert delivery.id == ready[key].pop(0), "a key's jobs go in line order"
            claims.append((key, backlogged))
    await queue.close()
    return claims


def check_rule(claims: list[tuple[str, set[str]]], weights: dict[str, int]) -> None:
    for x, y in itertools.combinations(KEYS, 2):
        bound = Fraction(1, weights[x]) + Fraction(1, weights[y])
        for start in range(len(claims)):
            share = {x: Fraction(0), y: Fraction(0)}
            for key, backlogged in claims[start:]:
                if not {x, y} <= backlogged:
                    break
                if key in share:
                    share[key] += Fraction(1, weights[key])
                assert abs(share[x] - share[y]) <= bound, (x, y, start, claims)


def check_alternation(claims: list[tuple[str, set[str]]]) -> None:
    """Equal weights: between two claims of a key, every key ready at each
    claim in between (and at the second) got one."""
    last: dict[str, int] = {}
    for i, (key, _) in enumerate(claims):
        if key in last:
            between = claims[last[key] + 1 : i + 1]
            throughout = set.intersection(*(b for _, b in between)) if between else set()
            served = {k for k, _ in between[:-1]}
            assert throughout - {key} <= served, (key, last[key], i, claims)
        last[key] = i


@pytest.mark.parametrize("kind", ["memory", "store"])
@settings(max_examples=60, deadline=None)
@given(
    weights=st.fixed_dictionaries({key: st.integers(1, 4) for key in KEYS}),
    ops=st.lists(_op, min_size=1, max_size=30),
)
def test_claims_keep_the_weighted_round_robin_rule(
    kind: str, weights: dict[str, int], ops: list[tuple[object, ...]]
) -> None:
    check_rule(asyncio.run(play(kind, weights, ops)), weights)


@pytest.mark.parametrize("kind", ["memory", "store"])
@settings(max_examples=60, deadline=None)
@given(ops=st.lists(_op, min_size=1, max_size=30))
def test_equal_weights_alternate_strictly(kind: str, ops: list[tuple[object, ...]]) -> None:
    weights = dict.fromkeys(KEYS, 1)
    claims = asyncio.run(play(kind, weights, ops))
    check_rule(claims, weights)
    check_alternation(claims)


def test_a_new_key_never_waits_behind_more_than_one_claim_of_each_other_key() -> None:
    shares = FairShares()
    for _ in range(10_000):
        shares.served("big")
    assert shares.standing("new") < shares.standing("big")


@pytest.mark.parametrize(
    ("key", "weight"),
    [("", None), ("has space", None), ("x" * 129, None), ("é", None), ("t", 0), ("t", 1001)],
)
def test_a_bad_key_or_weight_is_refused_naming_it(key: str, weight: int | None) -> None:
    with pytest.raises(ValueError, match="fairness_"):
        check_fairness(key, weight)
    with pytest.raises(ValueError, match="fairness_weight needs a fairness_key"):
        check_fairness(None, 2)


def test_stored_values_no_submit_wrote_count_as_no_key_or_weight_one() -> None:
    assert fairness_of({"stepstone.fairness_key": "a\x1b[2J"}) == ("", 1)
    assert fairness_of({"stepstone.fairness_key": "a", "stepstone.fairness_weight": "x"}) == (
        "a",
        1,
    )
    assert fairness_of({"stepstone.fairness_key": "a", "stepstone.fairness_weight": "99999"}) == (
        "a",
        1,
    )
    assert fairness_of(fairness_headers("a", 7)) == ("a", 7)
    assert bucket_of("") == 0 and all(1 <= bucket_of(k) <= 30 for k in KEYS)
