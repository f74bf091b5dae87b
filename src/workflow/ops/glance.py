"""What a run's records mean to people, for ``stepstone show`` and the web
view alike: a wait's memo as the date it holds, a taken event's payload
decoded as a step's value is, and a traceback with the job's own frames
first and stepstone's folded away.

The records keep what the engine needs (a wake time in epoch seconds, an
event's encoded bytes, every frame); these turn them into what an operator
reads, without changing what ``--json`` gives.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import stepstone.runtime
import stepstone.store
from stepstone.ops.reads import StoredMemo, decode_value
from stepstone.records.layout import step_name


def date(ts: object) -> str:
    """An epoch time as ``2026-01-31 12:00:00Z``; what is no time, as itself."""
    if isinstance(ts, bool) or not isinstance(ts, int | float):
        return repr(ts)
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except (OverflowError, ValueError, OSError):
        return repr(ts)


@dataclass(frozen=True, slots=True)
class WaitMemo:
    """A memo a durable wait or a child submit recorded, not a step
    (:mod:`stepstone.execute.durable_waits`, :meth:`stepstone.JobContext.submit`)."""

    what: str
    """``sleep``, ``deadline`` (an event wait's timeout), ``event`` (the event
    taken), ``child`` (the child's run id), ``stream`` and ``stream-close``
    (a stream's write and close), ``callback`` (a callback made) or
    ``took`` (what a callback's wait took)."""
    name: str
    """The event's, stream's or callback's name, or the child's kind ('' for
    a sleep; the callback's place for what its wait took)."""


_WAIT = re.compile(r"!(sleep|deadline|event|child)(?:\.([^@]*))?@")
_TAKE = re.compile(r"!callback@(.+)$")


def wait_memo(memo: StoredMemo) -> WaitMemo | None:
    """What wait (or child submit) recorded ``memo``; None for a step's memo.
    A memo of the run's history names its call; one keyed by name (recorded
    before positions) says it in its key (``!sleep@1``)."""
    if memo.call is not None:
        return None if memo.call.call == "step" else WaitMemo(memo.call.call, memo.call.name)
    took = _TAKE.match(memo.step_key)
    if took is not None:
        return WaitMemo("took", took[1])
    found = _WAIT.match(memo.step_key)
    if found is None:
        return None
    return WaitMemo(found[1], step_name(found[2]) if found[2] else "")


def memo_label(memo: StoredMemo) -> str:
    """A memo's name for people: the step's, or what its wait was."""
    wait = wait_memo(memo)
    if wait is None:
        return memo.step
    occurrence = memo.step_key.rpartition("@")[2] if memo.call is None else "1"
    nth = "" if occurrence == "1" else f" #{occurrence}"
    if wait.what == "sleep":
        return f"sleep{nth}"
    if wait.what == "deadline":
        return f"wait for event {wait.name}{nth}: deadline"
    if wait.what == "child":
        return f"child {wait.name}{nth}"
    if wait.what == "stream":
        return f"write to stream {wait.name}"
    if wait.what == "stream-close":
        return f"close of stream {wait.name}"
    if wait.what == "callback":
        return f"callback {wait.name}"
    if wait.what == "took":
        return f"what callback {wait.name} took"
    return f"event {wait.name}{nth}"


def memo_place(memo: StoredMemo) -> str:
    """A call's place for people: ``3`` (the run's own task), ``2.1/3`` (a
    branch's), ``-`` for a memo outside the history (a patch decision)."""
    if memo.position is None:
        return "-"
    if not memo.branch:
        return str(memo.position)
    return f"{'.'.join(map(str, memo.branch))}/{memo.position}"


def memo_note(memo: StoredMemo) -> str | None:
    """What is to be said of a memo beside its value: a replay that called
    the step with other arguments than it recorded."""
    if memo.changed_args is None:
        return None
    by = f"claim {memo.changed_args}" if memo.changed_args else "a later claim"
    return f"replayed by {by} with other arguments than it recorded (its recorded result stood)"


def memo_value(memo: StoredMemo) -> Any:
    """A memo's value for people: a wait's time as a date, an event as its
    payload decoded (or ``timed out``); a step's value (and a child's run
    id) as it is."""
    wait, value = wait_memo(memo), memo.value
    if wait is None or memo.unreadable is not None or wait.what == "child":
        return value
    if wait.what in ("sleep", "deadline"):
        return f"until {date(value)}"
    if wait.what == "stream":
        return f"item {value}"
    if wait.what == "stream-close":
        return f"closed at item {value}"
    if wait.what == "callback":
        expires = value.get("expires") if isinstance(value, dict) else None
        return "never expires" if expires is None else f"expires {date(expires)}"
    if wait.what == "took":
        return _took(value)
    if value is None:
        return "timed out: no event came before the deadline"
    if isinstance(value, dict) and isinstance(value.get("data"), bytes | str):
        return {"payload": decode_value(value["data"]), "event": value.get("key")}
    return value


def _took(value: Any) -> Any:
    """What a callback's wait took, for people: the completion as JSON."""
    if not isinstance(value, dict):
        return value
    if value.get("took") == "expired":
        return "expired: no completion before its timeout"
    body = value.get("body")
    if value.get("took") == "completed" and isinstance(body, str):
        return {"completed": body}  # (sealed, and not opened here: what sealed it)
    if value.get("took") == "completed" and isinstance(body, bytes):
        try:
            return {"completed": json.loads(body)}
        except ValueError:
            return {"completed": body.decode("utf-8", "replace")}
    return f"a completion of {value.get('size')} bytes, over what a callback takes"


# -- tracebacks ----------------------------------------------------------------------

_ENGINE_DIRS = (
    str(Path(__file__).resolve().parents[1]),
    *(
        str(Path(f).resolve().parent)
        for f in (stepstone.runtime.__file__, stepstone.store.__file__)
        if f
    ),
)
"""Where stepstone's own code lies in this process (its three layers)."""

_INSTALLED = re.compile(r"[/\\]site-packages[/\\]stepstone[/\\]")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line \d+')


@dataclass(frozen=True, slots=True)
class Folded:
    """A traceback with stepstone's frames taken out: ``shown`` is the rest
    (the job's frames, then the error), ``folded`` those frames."""

    shown: str
    folded: str
    count: int
    """How many frames were folded."""


def user_first(text: str) -> Folded:
    """``text`` (a Python traceback) with stepstone's frames folded: they sit
    above the job's in every traceback (the worker called the job), and tell
    the job's author nothing. A frame is stepstone's when its file lies in
    this process's stepstone, or in an installed one's ``site-packages``."""
    shown: list[str] = []
    folded: list[str] = []
    engine = False
    for line in text.splitlines():
        frame = _FRAME.match(line)
        if frame is not None:
            engine = _is_engine(frame["file"])
        elif not line.startswith("    "):
            engine = False  # the header, the error, "During handling of ..."
        (folded if engine else shown).append(line)
    count = sum(1 for line in folded if _FRAME.match(line))
    return Folded("\n".join(shown), "\n".join(folded), count)


def _is_engine(path: str) -> bool:
    return path.startswith(_ENGINE_DIRS) or _INSTALLED.search(path) is not None
