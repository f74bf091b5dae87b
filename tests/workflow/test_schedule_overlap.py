"""The overlap rule on its own (no store, no clock), checked against a
model of each policy over many random looks; the marker's new fields
decoded, and refused when they could not be real."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepstone.records.codec import pack
from stepstone.records.schedule_marker import MAX_BUFFERED, Marker, decode_marker
from stepstone.runtime.plausible import Implausible
from stepstone.schedule_overlap import Overlap, decide

POLICIES: list[Overlap] = ["skip", "buffer_one", "buffer_all", "cancel_other", "allow_all"]
NOW = 1_780_000_000.0


def test_each_policy_when_the_last_run_is_live() -> None:
    due = [1.0, 2.0, 3.0]
    assert decide("allow_all", live=True, buffered=[], due=due).start == due
    skip = decide("skip", live=True, buffered=[], due=due)
    assert skip.start == [] and [t for t, _ in skip.skipped] == due
    one = decide("buffer_one", live=True, buffered=[], due=due)
    assert one.buffered == [1.0] and [t for t, _ in one.skipped] == [2.0, 3.0]
    every = decide("buffer_all", live=True, buffered=[], due=due)
    assert every.buffered == due and every.skipped == []
    cancel = decide("cancel_other", live=True, buffered=[], due=due)
    assert cancel.cancel_live and cancel.start == [3.0]
    assert [t for t, _ in cancel.skipped] == [1.0, 2.0]
    assert all("superseded" in why for _, why in cancel.skipped)


def test_a_buffered_tick_starts_once_the_live_run_ended() -> None:
    ended = decide("buffer_one", live=False, buffered=[1.0], due=[])
    assert ended.start == [1.0] and ended.buffered == []
    still = decide("buffer_one", live=True, buffered=[1.0], due=[2.0])
    assert still.start == [] and still.buffered == [1.0] and still.skipped[0][0] == 2.0
    chain = decide("buffer_all", live=False, buffered=[1.0, 2.0], due=[3.0])
    assert chain.start == [1.0] and chain.buffered == [2.0, 3.0]


def test_the_reason_names_the_run_and_the_tick_waiting() -> None:
    shown = {1.0: "12:05", 2.0: "12:10", 3.0: "12:15"}
    one = decide("buffer_one", live=False, buffered=[], due=[1.0, 2.0, 3.0], shown=shown)
    assert one.skipped == [
        (3.0, "overlap buffer_one: the run of 12:05 was still live and 12:10 waits")
    ]


def _model(
    overlap: Overlap, live: bool, buffered: list[float], due: list[float]
) -> tuple[list[float], list[float], set[float], bool]:
    """Temporal's rules, one tick at a time: (started, waiting, skipped, cancelled the live run)."""
    started: list[float] = []
    waiting = list(buffered)
    skipped: set[float] = set()
    cancelled = False
    if overlap == "allow_all":
        return [*buffered, *due], [], set(), False
    if not live and waiting:
        started.append(waiting.pop(0))
        live = True
    for tick in due:
        if not live:
            started.append(tick)
            live = True
        elif overlap == "skip":
            skipped.add(tick)
        elif overlap == "buffer_one":
            if waiting:
                skipped.add(tick)
            else:
                waiting.append(tick)
        elif overlap == "buffer_all":
            if len(waiting) < MAX_BUFFERED:
                waiting.append(tick)
            else:
                skipped.add(tick)
        else:  # cancel_other: what it would start and cancel at once is skipped
            if started:
                skipped.add(started.pop())
            else:
                cancelled = True
            started.append(tick)
    return started, waiting, skipped, cancelled


@settings(max_examples=400, deadline=None)
@given(
    overlap=st.sampled_from(POLICIES),
    live=st.booleans(),
    buffered=st.integers(0, 3),
    due=st.integers(0, 120),
)
def test_decide_matches_the_model_and_accounts_for_every_tick(
    overlap: Overlap, live: bool, buffered: int, due: int
) -> None:
    if overlap in ("skip", "cancel_other", "allow_all"):
        buffered = 0
    if overlap == "buffer_one":
        buffered = min(buffered, 1)
    waiting = [float(n) for n in range(buffered)]
    ticks = [float(n) for n in range(buffered, buffered + due)]
    decision = decide(overlap, live=live, buffered=waiting, due=ticks)
    started, left, skipped, cancelled = _model(overlap, live, waiting, ticks)
    assert decision.start == started
    assert decision.buffered == left
    assert {tick for tick, _ in decision.skipped} == skipped
    assert decision.cancel_live == cancelled
    # Every tick is started, waits or is skipped, once.
    every = decision.start + decision.buffered + [tick for tick, _ in decision.skipped]
    assert sorted(every) == waiting + ticks
    if overlap != "allow_all":
        assert len(decision.start) <= 1
    if overlap == "buffer_one":
        assert len(decision.buffered) <= 1


def test_a_marker_keeps_what_the_policies_and_operators_wrote() -> None:
    marker = Marker(
        tick=NOW - 60,
        overlap="buffer_one",
        latest="a" * 64,
        latest_tick=NOW - 120,
        pending=True,
        cancel="b" * 64,
        buffered=(NOW - 60,),
        skipped_tick=NOW - 60,
        skipped_why="overlap skip: the run started last was still live",
        paused=True,
        paused_at=NOW - 30,
        paused_by="ana@host",
        note="the database moves",
        resumed_at=NOW - 3600,
    )
    assert decode_marker(marker.encode(), now=NOW) == marker


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("overlap", "sometimes"),
        ("pending", "yes"),
        ("paused", 1),
        ("latest", "../../etc"),
        ("cancel", 7),
        ("buffered", "soon"),
        ("buffered", [NOW] * (MAX_BUFFERED + 1)),
        ("buffered", [math.nan]),
        ("paused_at", math.inf),
        ("note", "\x1b[31mred"),
        ("skipped_why", "x" * 10_000),
    ],
)
def test_a_marker_field_that_could_not_be_real_is_named(field: str, value: object) -> None:
    data = pack({"tick": NOW - 60, field: value})
    with pytest.raises((Implausible, ValueError), match=field.split("_")[0]):
        decode_marker(data, now=NOW)
