"""The order things happened in a run: its steps, placed among its claims.

A call's memo says when the call began and when it was recorded, by the
worker's clock (:mod:`stepstone.records.calls`); a patch decision, when it
was taken. So a run's calls are listed in the order they began, each
branch's interleaved with the others', and each step took its own time
(from its call to its memo).

Memos recorded before they kept their times are placed by their position
in the run (or, older still, by the store's time of their write: S3's
LastModified, a file's mtime), and each took the time since the previous
memo of the same claim, or since its claim began for the claim's first: the
step's own time plus the job's code before it. Each claim's start and end
times come from the attempt history (:mod:`stepstone.records.history`).

Both clocks are approximate: the store's times may be a second coarse (S3)
and skewed against the worker's, so a duration is never negative, and one
shorter than the clocks' resolution reads as zero. ``stepstone show`` and
``stepstone ui`` show what is here.
"""

from __future__ import annotations

from dataclasses import dataclass

from stepstone.ops.reads import Detail, StoredMemo
from stepstone.ops.talk import shown_as_step
from stepstone.records.attempts import AttemptInfo


@dataclass(frozen=True, slots=True)
class RanStep:
    """A recorded step, in the order the steps ran."""

    memo: StoredMemo
    claim: int | None
    """The claim that recorded it (None: one not in the history, such as the
    claim running now)."""
    seconds: float | None
    """Since the previous step the same claim recorded, or the claim's start."""

    @property
    def name(self) -> str:
        return self.memo.step

    @property
    def recorded_at(self) -> float:
        return self.memo.modified


def _recorded_order(memo: StoredMemo) -> tuple[int, float]:
    """Memos keyed by name first (recorded before positions existed), by
    their time; then the run's history, by position."""
    if memo.position is None:
        return (0, memo.modified)
    return (1, float(memo.position))


def _began(memo: StoredMemo) -> float:
    assert memo.began is not None
    return memo.began


def steps_in_order(memos: list[StoredMemo], history: list[AttemptInfo]) -> list[RanStep]:
    """``memos`` (of one incarnation) in the order they were recorded, each
    with the claim that recorded it and how long it took."""
    spans = sorted(
        (
            (a.claimed_at, float("inf") if a.ended_at is None else a.ended_at, a.claim)
            for a in history
            if a.claimed_at is not None
        ),
        key=lambda span: span[:2],  # (by time: a claim's number may be unknown, None)
    )
    steps: list[RanStep] = []
    if memos and all(memo.began is not None for memo in memos):
        for memo in sorted(memos, key=_began):
            span = _span_of(_began(memo), spans)
            own = None if memo.ended is None else max(0.0, memo.ended - _began(memo))
            steps.append(RanStep(memo, None if span is None else span[2], own))
        return steps
    previous: dict[int | None, float] = {}
    for memo in sorted(memos, key=_recorded_order):
        span = _span_of(memo.modified, spans)
        claim = None if span is None else span[2]
        start = previous.get(claim, None if span is None else span[0])
        seconds = None if start is None else max(0.0, memo.modified - start)
        steps.append(RanStep(memo, claim, seconds))
        previous[claim] = memo.modified
    return steps


CLOCK_SLACK = 1.0
"""Seconds a memo's time may stray outside its claim's: S3 keeps whole seconds."""

Span = tuple[float, float, int | None]
"""A claim's start, its end (inf: not known), its number."""


def _span_of(at: float, spans: list[Span]) -> Span | None:
    """The claim under way at ``at``: the last that had begun by then and not
    yet ended; failing that (the clocks disagree), the one whose span is
    nearest, within CLOCK_SLACK."""
    for span in reversed(spans):
        if span[0] <= at <= span[1]:
            return span
    nearest, distance = None, CLOCK_SLACK
    for span in spans:
        off = max(span[0] - at, at - span[1], 0.0)
        if off <= distance:
            nearest, distance = span, off
    return nearest


def current_steps(found: Detail) -> list[RanStep]:
    """The steps of the run's current incarnation, in order (its streams'
    writes apart: :mod:`stepstone.ops.talk` shows those)."""
    memos = [
        m for m in found.memos if m.incarnation == (found.incarnation or "") and shown_as_step(m)
    ]
    return steps_in_order(memos, found.history)


def earlier_steps(found: Detail) -> dict[str, list[StoredMemo]]:
    """Memos of other incarnations (an earlier run of the key), by
    incarnation, each in the order it was recorded."""
    by_incarnation: dict[str, list[StoredMemo]] = {}
    for memo in sorted(found.memos, key=lambda m: m.modified):
        if memo.incarnation != (found.incarnation or ""):
            by_incarnation.setdefault(memo.incarnation, []).append(memo)
    return by_incarnation


def took(seconds: float | None) -> str:
    """A duration for people: ``350 ms``, ``4.2 s``, ``3m 05s``, ``2h 10m``."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"
