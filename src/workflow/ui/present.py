"""What the pages show, made from what :mod:`stepstone.ops.reads` reads.

Plain data and formatting, no HTML: the templates lay these out, and
Jinja2's autoescaping (with control characters made visible first, see
:mod:`stepstone.ui.app`) makes every string safe to put in a page. Job-provided
values (inputs, results, memos, progress, error messages) are shown as
indented JSON, cut at ``VALUE_CHARS``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar
from urllib.parse import urlencode

from markupsafe import Markup

from stepstone.ops.attribute_filter import parse_attributes
from stepstone.ops.durations import parse_since
from stepstone.ops.glance import memo_label, memo_note, memo_place, memo_value, wait_memo
from stepstone.ops.listing import RunFilter
from stepstone.ops.reads import Detail, StoredMemo, decode_value
from stepstone.ops.timeline import current_steps, earlier_steps, took
from stepstone.records.attempts import AttemptInfo
from stepstone.runtime.queue import JobRecord
from stepstone.runtime.status import JobStatus
from stepstone.ui.draw import run_timeline

VALUE_CHARS = 4000
"""A value longer than this as JSON is cut (``stepstone show --json`` has it whole)."""

SINCE = ("15m", "1h", "24h", "7d")
"""The ages the runs list offers (it takes any that ``stepstone ls --since``
takes: a duration or an ISO time)."""


def when(ts: float | None) -> str:
    """A timestamp as ``2026-01-31 12:00:00Z``, or ``-``; what is no time
    (records are checked when decoded: this is the last line) as itself."""
    if ts is None:
        return "-"
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except (OverflowError, ValueError, OSError, TypeError):
        return f"{ts!r} (not a time)"


def ago(ts: float | None, now: float) -> str:
    """How long before ``now``: ``12 s ago``, ``in 3m 00s`` for a time to come."""
    if ts is None:
        return ""
    delta = now - ts
    return f"{took(delta)} ago" if delta >= 0 else f"in {took(-delta)}"


def pretty(value: Any) -> str:
    """A stored value as indented JSON (a string as itself), cut at VALUE_CHARS."""
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, indent=2, ensure_ascii=False, default=_jsonable)
    if len(text) > VALUE_CHARS:
        return f"{text[:VALUE_CHARS]}\n... ({len(text) - VALUE_CHARS} more characters)"
    return text


def _jsonable(obj: object) -> object:
    if isinstance(obj, bytes):
        return f"<{len(obj)} bytes>"
    return str(obj)


# -- the runs list ------------------------------------------------------------------


LIMIT = 100
"""Rows the runs list reads unless ``?limit=`` says otherwise (at most MAX_LIMIT)."""
MAX_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class Filters:
    """The runs list's filters, as the query string gives them (so a link
    holds them), and what is wrong with them."""

    FIELDS: ClassVar[tuple[str, ...]] = (
        "state",
        "kind",
        "since",
        "version",
        "key",
        "attr",
        "limit",
    )

    state: str = ""
    kind: str = ""
    since: str = ""
    version: str = ""
    key: str = ""
    """The start of the runs' idempotency keys."""
    limit: int = LIMIT
    problems: tuple[str, ...] = ()
    attr: str = ""
    """Attributes the runs have: ``name=value``, several separated by commas
    (found through the index of attributes, :mod:`stepstone.ops.by_attributes`)."""

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> Filters:
        def field(name: str) -> str:
            return query.get(name, "").strip()

        state, since = field("state"), field("since")
        problems = []
        if state and state not in {status.value for status in JobStatus}:
            problems.append(f"unknown state {state!r}")
        if since:
            try:
                parse_since(since, 0.0)
            except ValueError as exc:
                problems.append(f"unknown age {since!r}: {exc}")
        try:
            limit = min(MAX_LIMIT, max(1, int(query.get("limit") or LIMIT)))
        except ValueError:
            problems.append(f"limit must be a number, not {query.get('limit')!r}")
            limit = LIMIT
        attr = field("attr")
        if attr:
            try:
                attributes_of(attr)
            except ValueError as exc:
                problems.append(str(exc))
        return cls(
            state,
            field("kind"),
            since,
            field("version"),
            field("key"),
            limit,
            tuple(problems),
            attr=attr,
        )

    @property
    def any(self) -> bool:
        """Whether any filter is set."""
        return bool(self.state or self.kind or self.since or self.version or self.key or self.attr)

    def query(self) -> str:
        """These filters as a query string (those set), for a link that keeps them."""
        fields = {
            "state": self.state,
            "kind": self.kind,
            "since": self.since,
            "version": self.version,
            "key": self.key,
            "attr": self.attr,
            "limit": "" if self.limit == LIMIT else str(self.limit),
        }
        return urlencode({name: value for name, value in fields.items() if value})

    def chosen(self, now: float) -> RunFilter:
        """The runs these filters choose (call only when there are no problems)."""
        return RunFilter(
            status=JobStatus(self.state) if self.state else None,
            kind=self.kind or None,
            since=parse_since(self.since, now) if self.since else None,
            version=self.version or None,
            key_prefix=self.key or None,
            attributes=attributes_of(self.attr) if self.attr else None,
        )


def attributes_of(text: str) -> dict[str, str]:
    """The attributes the list's field gives: ``name=value`` pairs separated
    by commas; ValueError naming one that is not."""
    return parse_attributes(
        [part.strip() for part in text.split(",") if part.strip()], where="attributes"
    )


# -- one run -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StepView:
    """A recorded step, in the order the steps ran (:mod:`stepstone.ops.timeline`)."""

    name: str
    recorded_at: float
    seconds: float | None
    """Since the previous step its claim recorded, or the claim's start: the
    step's own time and the job's code before it."""
    claim: int | None
    value: str
    unreadable: str | None
    place: str = "-"
    """Its place: ``3``, ``2.1/3`` in a branch, ``-`` outside the history."""
    note: str | None = None
    """What is to be said of it (a replay with other arguments)."""


@dataclass(slots=True)
class RunView:
    """Everything the run page shows."""

    detail: Detail
    steps: list[StepView]
    leftovers: dict[str, list[StepView]]
    """Memos of earlier incarnations (a run of the same key before a retry
    of the whole run, or a swept one), by incarnation."""
    attempts: list[AttemptInfo]
    """Each claim of the run that has ended, in order (its attempt history)."""
    running: JobRecord | None
    """The queue record, while a claim is running (it is not in the history yet)."""
    result: str | None = None
    events: list[tuple[float, str]] = field(default_factory=list)
    chart: Markup | None = None
    """Its claims, waits and steps on one time axis (:mod:`stepstone.ui.draw`)."""
    step_names: list[str] = field(default_factory=list)
    """The names of the steps it recorded, once each, in order: where a replay may start."""


def run_view(found: Detail, now: float, link: Callable[[str], str]) -> RunView:
    """What the run's page shows of ``found``; ``link``: a run's page's path, by its id."""
    outcome, queued = found.outcome, found.queued
    return RunView(
        detail=found,
        steps=[_step(step.memo, step.seconds, step.claim) for step in current_steps(found)],
        leftovers={
            incarnation: [_step(memo, None, None) for memo in memos]
            for incarnation, memos in earlier_steps(found).items()
        },
        attempts=found.history,
        running=queued if queued is not None and queued.status is JobStatus.RUNNING else None,
        result=None
        if outcome is None or outcome.result is None
        else pretty(decode_value(outcome.result)),
        events=_events(found),
        chart=run_timeline(found, current_steps(found), now, link),
        step_names=list(
            dict.fromkeys(
                step.memo.call.name if step.memo.call is not None else step.memo.step
                for step in current_steps(found)
                if wait_memo(step.memo) is None and step.memo.position is not None
            )
        ),
    )


def _step(memo: StoredMemo, seconds: float | None, claim: int | None) -> StepView:
    """A memo as the page shows it: a wait's as what it waited for
    (:mod:`stepstone.ops.glance`), a step's as its value."""
    value = "" if memo.unreadable else pretty(memo_value(memo))
    return StepView(
        memo_label(memo),
        memo.modified,
        seconds,
        claim,
        value,
        memo.unreadable,
        memo_place(memo),
        memo_note(memo),
    )


def _events(found: Detail) -> list[tuple[float, str]]:
    """The run's dated facts, oldest first: submitted, each claim's start and
    end, suspensions, due and wake times, finished."""
    outcome, queued = found.outcome, found.queued
    events: list[tuple[float, str]] = []
    submitted = queued.created_at if queued is not None else None
    if submitted is None and outcome is not None:
        submitted = outcome.submitted_at
    if submitted:
        events.append((submitted, "submitted"))
    for attempt in found.history:
        which = f"claim {attempt.claim}"
        if attempt.number is not None:
            which += f" (attempt {attempt.number})"
        if attempt.claimed_at is not None:
            events.append((attempt.claimed_at, f"{which} started"))
        if attempt.ended_at is not None:
            events.append((attempt.ended_at, f"{which} ended: {attempt.result.value}"))
    if queued is not None:
        if queued.wait is not None:
            events.append((queued.run_at, "wakes (at the latest)"))
        elif queued.status is JobStatus.SCHEDULED:
            events.append((queued.run_at, "due"))
        if queued.lease_expires_at is not None and queued.status is JobStatus.RUNNING:
            events.append((queued.lease_expires_at, "lease expires (renewed while it runs)"))
        if queued.dead_reason:
            events.append((queued.updated_at, f"dead: {queued.dead_reason}"))
    if outcome is not None:
        events.append((outcome.finished_at, outcome.status.value))
    return sorted(events, key=lambda event: event[0])
