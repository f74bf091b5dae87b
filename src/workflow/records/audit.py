"""An audit record: one operator action, who did it, from where, and how it ended.

The web view's actions and the CLI's (``retry``, ``cancel``, ``replay``,
``purge``, an event sent from the view) each leave one, written before the
action (its outcome ``started``) and written again once it is over, with
its outcome and a line saying what was done. A record still ``started`` is
an action whose process stopped before it could say how it ended.

Stored as JSON, readable with any tool (``aws s3 cp ... -``): the fields
are those of :class:`AuditRecord`, ``v`` the format's version. Decoding
checks every field, so a record that was tampered with, or is no record,
raises ValueError naming what is wrong rather than reaching a page or a
terminal as it is.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from stepstone.runtime import plausible
from stepstone.runtime.run_id import is_storable_id

FORMAT = 1
ACTIONS = ("retry", "cancel", "replay", "event", "callback", "purge", "pause", "resume", "backfill")
Action = Literal[
    "retry", "cancel", "replay", "event", "callback", "purge", "pause", "resume", "backfill"
]
Outcome = Literal["started", "done", "partial", "refused", "failed"]
OUTCOMES: tuple[str, ...] = get_args(Outcome)
Via = Literal["web", "cli"]
SignIn = Literal["password", "proxy", "none", "os"]
"""How the actor was known: signed in with a password, named by a trusted
proxy, nobody signed in (a view on this machine only), the operating
system's user of a CLI command."""
KEPT_RUNS = 1000
"""Run ids a record lists at most (``count`` says how many there were): a
purge may remove a hundred thousand. Each run acted on has its own entry in
the run's index all the same (:mod:`stepstone.records.audit_log`)."""
KEPT_REFUSALS = 100
"""Runs a record names with why they were not done, at most."""
LONGEST_TEXT = 2000
"""Characters of a result line or a refusal's reason a record keeps."""


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts: a name, how it was known, the role it acted in, and the
    address the request came from (None for the CLI: ``name`` holds its host)."""

    name: str
    via: Via
    sign_in: SignIn
    role: str | None = None
    address: str | None = None


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One operator action. ``id`` orders records by when they began
    (``2026-01-31T120000.123456-1a2b3c4d``)."""

    id: str
    at: float
    """When the action began (the acting process's clock)."""
    actor: Actor
    action: Action
    runs: tuple[str, ...]
    """The runs it was asked to act on (the first ``KEPT_RUNS``); a purge's
    are the runs it removed."""
    count: int
    """How many runs: ``len(runs)`` unless more than were kept."""
    detail: Mapping[str, str] = field(default_factory=dict)
    """What else it was asked: ``from_step``, ``event``, ``older_than``,
    ``leave_children``; a schedule's action: ``schedule``, ``note``, ``from``, ``to``."""
    outcome: Outcome = "started"
    ended: float | None = None
    result: str = ""
    """What was done, in a line (as the page or the command said it)."""
    refused: Mapping[str, str] = field(default_factory=dict)
    """Runs not done, each with why (the first ``KEPT_REFUSALS``)."""

    def ending(
        self,
        outcome: Outcome,
        ended: float,
        result: str,
        refused: Mapping[str, str] | None = None,
        *,
        runs: Sequence[str] | None = None,
    ) -> AuditRecord:
        """This record, over: how it ended, when, what was done and which
        runs were refused (``runs``: those it turned out to touch, for a purge)."""
        changed = replace(
            self,
            outcome=outcome,
            ended=ended,
            result=result[:LONGEST_TEXT],
            refused={
                run_id: why[:LONGEST_TEXT]
                for run_id, why in list((refused or {}).items())[:KEPT_REFUSALS]
            },
        )
        if runs is not None:
            changed = replace(changed, runs=tuple(runs[:KEPT_RUNS]), count=len(runs))
        return changed

    def encode(self) -> bytes:
        return json.dumps(
            {
                "v": FORMAT,
                "id": self.id,
                "at": self.at,
                "who": self.actor.name,
                "via": self.actor.via,
                "sign_in": self.actor.sign_in,
                "role": self.actor.role,
                "address": self.actor.address,
                "action": self.action,
                "runs": list(self.runs),
                "count": self.count,
                "detail": dict(self.detail),
                "outcome": self.outcome,
                "ended": self.ended,
                "result": self.result,
                "refused": dict(self.refused),
            },
            ensure_ascii=False,
            indent=1,
        ).encode()


def new_record(
    actor: Actor,
    action: Action,
    runs: Sequence[str],
    detail: Mapping[str, str],
    *,
    now: float,
) -> AuditRecord:
    """The record of an action beginning now."""
    return AuditRecord(
        id=record_id(now),
        at=now,
        actor=actor,
        action=action,
        runs=tuple(runs[:KEPT_RUNS]),
        count=len(runs),
        detail=dict(detail),
    )


def record_id(now: float) -> str:
    """An id that sorts by time: ``<date>T<time>-<random>``, UTC, to the microsecond."""
    return f"{stamp(now)}-{secrets.token_hex(4)}"


def stamp(now: float) -> str:
    """``now`` as a record id begins (``2026-01-31T120000.123456``): every id
    of an action begun at ``now`` or later sorts at or after it."""
    return f"{datetime.fromtimestamp(now, UTC):%Y-%m-%dT%H%M%S.%f}"


def day_of(record_id: str) -> str:
    """The date part of a record's id (``2026-01-31``): its log's folder."""
    return record_id.partition("T")[0]


def is_record_id(value: object) -> bool:
    """Whether ``value`` could be an id :func:`record_id` made."""
    if not isinstance(value, str) or len(value) != 33:
        return False
    day, _, rest = value.partition("T")
    stamp, _, token = rest.partition("-")
    try:
        datetime.strptime(f"{day}T{stamp}", "%Y-%m-%dT%H%M%S.%f")
    except ValueError:
        return False
    return len(token) == 8 and all(c in "0123456789abcdef" for c in token)


def decode_record(data: bytes, *, now: float) -> AuditRecord:
    """The record in ``data``; raises ValueError saying what is wrong when it
    does not decode or holds what no action could have written."""
    try:
        fields = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(fields, dict) or fields.get("v") != FORMAT:
        raise ValueError(f"not an audit record of format {FORMAT}")
    if not is_record_id(fields.get("id")):
        shown = plausible.shown(fields.get("id"))
        raise plausible.Implausible(f"its id is not a record id: {shown}")
    runs = fields.get("runs")
    if not isinstance(runs, list) or len(runs) > KEPT_RUNS:
        raise plausible.Implausible(f"runs is not a list of at most {KEPT_RUNS} run ids")
    for run_id in runs:
        if not is_storable_id(run_id):
            raise plausible.Implausible(f"runs holds what is no run id: {plausible.shown(run_id)}")
    refused = _texts(fields.get("refused"), "refused")
    if any(not is_storable_id(run_id) for run_id in refused):
        raise plausible.Implausible("refused names what is no run id")
    return AuditRecord(
        id=fields["id"],
        at=plausible.time(fields.get("at"), "at", now=now),
        actor=Actor(
            name=plausible.name(fields.get("who"), "who", longest=300),
            via=_one_of(fields.get("via"), get_args(Via), "via"),
            sign_in=_one_of(fields.get("sign_in"), get_args(SignIn), "sign_in"),
            role=_optional_name(fields.get("role"), "role"),
            address=_optional_name(fields.get("address"), "address"),
        ),
        action=_one_of(fields.get("action"), ACTIONS, "action"),
        runs=tuple(runs),
        count=plausible.count(fields.get("count"), "count", most=2**53),
        detail=_texts(fields.get("detail"), "detail"),
        outcome=_one_of(fields.get("outcome"), OUTCOMES, "outcome"),
        ended=plausible.optional_time(fields.get("ended"), "ended", now=now),
        result=_text(fields.get("result"), "result"),
        refused=refused,
    )


def _one_of(value: Any, allowed: Sequence[str], name: str) -> Any:
    if value not in allowed:
        raise plausible.Implausible(f"{name} is not one of {', '.join(allowed)}")
    return value


def _optional_name(value: object, name: str) -> str | None:
    return None if value is None else plausible.name(value, name, longest=300)


def _text(value: object, name: str) -> str:
    if not isinstance(value, str) or len(value) > LONGEST_TEXT:
        raise plausible.Implausible(f"{name} is not text of at most {LONGEST_TEXT} characters")
    return value


def _texts(value: object, name: str) -> dict[str, str]:
    if not isinstance(value, dict) or len(value) > KEPT_REFUSALS:
        raise plausible.Implausible(f"{name} is not a mapping of at most {KEPT_REFUSALS} texts")
    return {_text(k, name): _text(v, name) for k, v in value.items()}
