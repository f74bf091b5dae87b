"""The decisions behind concurrency keys and rate limits, without a store:
who gets a slot, who waits and in what order, who is woken, what a lapsed
or stale holder may still do; and when a rate limit lets each run start."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Any

import pytest

from stepstone import CorruptRecord, RateLimit
from stepstone.limits import rate, slots
from stepstone.limits.slots import Holder, SlotDecision, SlotTable, Waiter

GRACE = 60.0
acquire = partial(slots.acquire, job="t", key="k", grace=GRACE)
release = partial(slots.release, grace=GRACE)
renew = partial(slots.renew, grace=GRACE)
forget = partial(slots.forget, grace=GRACE)


def take(table: SlotTable | None, run: str, *, now: float = 0.0, limit: int = 1) -> SlotDecision:
    return acquire(table, limit=limit, run=run, token=f"tok-{run}", until=now + 30, now=now)


def queue_of(table: SlotTable | None) -> list[str]:
    return [] if table is None else [w.run for w in table.waiters]


def holders_of(table: SlotTable | None) -> list[str]:
    return [] if table is None else [h.run for h in table.holders]


# -- concurrency slots ---------------------------------------------------------------


def test_runs_take_free_slots_then_wait_in_the_order_they_asked() -> None:
    table: SlotTable | None = None
    granted = []
    for run in ["a", "b", "c", "d"]:
        decision = take(table, run, limit=2)
        table = decision.table
        granted.append(decision.held)
    assert granted == [True, True, False, False]
    assert holders_of(table) == ["a", "b"] and queue_of(table) == ["c", "d"]
    assert take(table, "e", limit=2).ahead == 2


def test_a_release_wakes_the_first_in_line_who_then_takes_the_slot() -> None:
    table = take(take(take(None, "a").table, "b").table, "c").table
    freed = release(table, run="a", token="tok-a", now=1.0)
    assert freed.held and freed.wake == ("b",) and holders_of(freed.table) == []
    # Nobody barges in ahead of a woken waiter: a newcomer waits behind "c".
    newcomer = take(freed.table, "z", now=1.5)
    assert not newcomer.held and queue_of(newcomer.table) == ["b", "c", "z"]
    came = take(newcomer.table, "b", now=2.0)
    assert came.held and holders_of(came.table) == ["b"] and queue_of(came.table) == ["c", "z"]


def test_a_woken_waiter_who_finds_no_room_keeps_its_place() -> None:
    table = take(take(take(None, "a").table, "b").table, "c").table
    # "b" comes back (a wake it was given earlier, say) while "a" still holds.
    again = take(table, "b", now=1.0)
    assert not again.held and again.ahead == 0 and queue_of(again.table) == ["b", "c"]


def test_a_woken_waiter_is_not_woken_again_until_its_grace_has_passed() -> None:
    table = take(take(take(None, "a").table, "b").table, "c").table
    freed = release(table, run="a", token="tok-a", now=1.0)
    assert freed.wake == ("b",)
    # Another change of the table soon after: "b" is on its way.
    soon = take(freed.table, "d", now=2.0)
    assert soon.wake == ()
    # Past the grace its wake is taken for lost, and it is woken again.
    late = take(soon.table, "e", now=1.0 + GRACE)
    assert late.wake == ("b",)


def test_a_lapsed_holder_is_dropped_and_its_slot_goes_to_the_line() -> None:
    table = take(take(None, "a", now=0.0).table, "b", now=0.0).table  # a until 30
    newcomer = take(table, "c", now=31.0)
    # "b" asked first: it is woken; "c" waits behind it.
    assert not newcomer.held and newcomer.wake == ("b",)
    assert holders_of(newcomer.table) == [] and queue_of(newcomer.table) == ["b", "c"]
    alone = take(take(None, "a", now=0.0).table, "c", now=31.0)
    assert alone.held and holders_of(alone.table) == ["c"]


def test_release_and_renewal_are_fenced_by_the_holders_token() -> None:
    table = take(take(None, "a").table, "b").table
    stale = release(table, run="a", token="another-claim", now=1.0)
    assert not stale.held and holders_of(stale.table) == ["a"] and stale.wake == ()
    assert not renew(table, run="a", token="another-claim", until=99.0, now=1.0).held
    renewed = renew(table, run="a", token="tok-a", until=99.0, now=1.0)
    assert renewed.held and renewed.table is not None
    assert renewed.table.holders == (Holder("a", "tok-a", 99.0),)


def test_a_lapsed_holder_that_was_taken_over_cannot_renew_or_release() -> None:
    table = take(None, "a", now=0.0).table
    taken = take(table, "b", now=31.0).table
    assert not renew(taken, run="a", token="tok-a", until=200.0, now=31.5).held
    stale = release(taken, run="a", token="tok-a", now=31.5)
    assert not stale.held and holders_of(stale.table) == ["b"]


def test_a_lapsed_holder_nobody_acted_on_may_still_renew() -> None:
    table = take(None, "a", now=0.0).table
    late = renew(table, run="a", token="tok-a", until=90.0, now=40.0)
    assert late.held and late.table is not None and late.table.holders[0].until == 90.0


def test_a_new_claim_of_a_run_takes_its_live_slot_over_ahead_of_the_line() -> None:
    # "a" suspended for its rate limit's start keeping its slot; "b" waits.
    table = take(take(None, "a").table, "b").table
    back = acquire(table, limit=1, run="a", token="second-claim", until=50.0, now=10.0)
    assert back.held and back.table is not None
    assert back.table.holders == (Holder("a", "second-claim", 50.0),)
    assert queue_of(back.table) == ["b"]


def test_the_table_goes_when_nobody_holds_or_waits() -> None:
    table = take(None, "a").table
    assert release(table, run="a", token="tok-a", now=1.0).table is None


def test_forget_drops_an_ended_runs_slot_or_place_and_wakes_the_next() -> None:
    table = take(take(take(None, "a").table, "b").table, "c").table
    gone_waiter = forget(table, run="b", now=1.0)
    assert queue_of(gone_waiter.table) == ["c"] and gone_waiter.wake == ()
    gone_holder = forget(gone_waiter.table, run="a", now=1.0)
    assert gone_holder.held and gone_holder.wake == ("c",)


def test_a_lower_limit_lets_nobody_in_until_enough_holders_have_left() -> None:
    table = take(take(None, "a", limit=2).table, "b", limit=2).table
    assert not take(table, "c", limit=1).held
    freed = release(table, run="a", token="tok-a", now=1.0)
    assert freed.table is not None and freed.table.free == 1  # still at the old limit of 2


def test_a_table_survives_its_round_trip_through_stored_fields() -> None:
    table = SlotTable("t", "k", 2, (Holder("a", "x", 1.5),), (Waiter("b"), Waiter("c", 2.0)))
    assert slots.from_fields(slots.to_fields(table), "slots/x") == table


@pytest.mark.parametrize("fields", [None, {}, {"job": "t", "key": "k", "limit": "x"}])
def test_a_table_that_does_not_decode_names_its_key(fields: Any) -> None:
    with pytest.raises(Exception, match="slots/x"):
        slots.from_fields(fields, "slots/x")


# -- rate limits ------------------------------------------------------------------


def starts(limit: RateLimit, asked_at: list[float]) -> list[float]:
    state = None
    given = []
    for now in asked_at:
        state, start = rate.reserve(state, job="t", key=None, limit=limit, now=now)
        given.append(start)
    return given


def test_runs_asking_at_once_get_starts_one_interval_apart() -> None:
    assert starts(RateLimit(4, per=timedelta(seconds=1)), [0.0] * 5) == [0.0, 0.25, 0.5, 0.75, 1.0]


def test_a_burst_starts_at_once_then_keeps_to_the_rate() -> None:
    limit = RateLimit(2, per=timedelta(seconds=1), burst=3)
    assert starts(limit, [0.0] * 5) == [0.0, 0.0, 0.0, 0.5, 1.0]


def test_a_quiet_spell_does_not_bank_more_than_the_burst() -> None:
    limit = RateLimit(10, per=timedelta(seconds=1), burst=2)
    assert starts(limit, [0.0, 100.0, 100.0, 100.0]) == [0.0, 100.0, 100.0, 100.1]


@pytest.mark.parametrize("burst", [1, 3])
def test_no_span_holds_more_starts_than_the_limit_says(burst: int) -> None:
    limit = RateLimit(5, per=timedelta(seconds=2), burst=burst)
    asked = [i * 0.05 for i in range(40)] + [3.0] * 20 + [30.0 + i for i in range(5)]
    given = sorted(starts(limit, asked))
    for span in (0.4, 1.0, 2.0, 7.0):
        # (Less a nanosecond: starts are sums of float intervals, off by 1e-16.)
        most = max(sum(1 for t in given if start <= t < start + span - 1e-9) for start in given)
        assert most <= limit.most_in(span)
    assert limit.most_in(2.0) == 5 + burst - 1


@pytest.mark.parametrize(
    "args",
    [(0,), (1.5,), (1, timedelta(0)), (1, 1.0), (1, timedelta(seconds=1), 0)],
)
def test_a_rate_limit_refuses_nonsense(args: tuple[Any, ...]) -> None:
    with pytest.raises(ValueError):
        RateLimit(*args)


# -- values that could not be real -----------------------------------------------

NOW = 1.8e9


@pytest.mark.parametrize("until", [1e18, float("inf"), float("nan"), NOW + 2 * slots.HOLD_AHEAD])
def test_a_holder_whose_lease_could_not_be_real_blocks_nobody(until: float) -> None:
    """A stored holder whose ``until`` is not a time a lease could end at
    (``1e18``, ``"inf"`` read back as a float) is dropped like a lapsed one:
    the key's slot goes to the next run, and the repaired table is written."""
    table = SlotTable("t", "k", 1, holders=(Holder("ghost", "tok", until),))
    assert slots.implausible(table, NOW, GRACE)
    decision = take(table, "next", now=NOW)
    assert decision.held and holders_of(decision.table) == ["next"]
    assert not slots.implausible(decision.table, NOW, GRACE)


@pytest.mark.parametrize("woken_at", [float("inf"), float("nan"), 1e18])
def test_a_waiter_woken_at_a_time_that_could_not_be_real_is_woken_again(woken_at: float) -> None:
    table = SlotTable("t", "k", 1, waiters=(Waiter("first", woken_at),))
    decision = forget(table, run="other", now=NOW)
    assert decision.wake == ("first",)


@pytest.mark.parametrize("limit", [0, -5, 2**63, -(2**63)])
def test_a_stored_limit_that_could_not_be_real_still_wakes_the_first_in_line(limit: int) -> None:
    """A limit below 1 would wake nobody when a holder leaves, one of 2**63
    every waiter at once: it counts as 1 until the next acquire writes the
    type's own limit, so the holder's release wakes the first in line."""
    holders, waiters = (Holder("a", "tok-a", NOW + 30),), (Waiter("b"), Waiter("c"))
    table = SlotTable("t", "k", limit, holders=holders, waiters=waiters)
    assert slots.implausible(table, NOW, GRACE) == [f"limit {limit!r}"]
    decision = release(table, run="a", token="tok-a", now=NOW)
    assert decision.held and decision.wake == ("b",)
    assert decision.table is not None and not slots.implausible(decision.table, NOW, GRACE)
    came = take(decision.table, "b", now=NOW, limit=2)
    assert came.held and came.table is not None and came.table.limit == 2


@pytest.mark.parametrize("limit", [1.5, float("inf"), "3", None, True])
def test_a_stored_limit_that_is_not_a_whole_number_makes_the_table_unreadable(
    limit: object,
) -> None:
    fields = slots.to_fields(SlotTable("t", "k", 1))
    with pytest.raises(CorruptRecord, match="slots/x"):
        slots.from_fields({**fields, "limit": limit}, "slots/x")


@pytest.mark.parametrize("tat", [float("nan"), float("inf"), 1e11, NOW + 1e7])
def test_a_rate_state_that_could_not_be_real_starts_afresh(tat: float) -> None:
    """A NaN would switch the limit off, an inf fail every run, a time
    centuries ahead hold every run: each is taken as no state, and the
    limit keeps to its rate from now."""
    limit = RateLimit(4, per=timedelta(seconds=1))
    state: rate.RateState | None = rate.RateState("t", None, tat)
    assert state is not None and not rate.real(state, limit, NOW)
    given = []
    for _ in range(3):
        state, start = rate.reserve(state, job="t", key=None, limit=limit, now=NOW)
        given.append(start)
    assert given == [NOW, NOW + 0.25, NOW + 0.5]
    assert rate.real(state, limit, NOW)
