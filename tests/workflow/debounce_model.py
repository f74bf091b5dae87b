"""The debounce rule as a model, and a check of what a fleet did against it.

The model is written apart from the engine's rules (stepstone.records.
debounce_windows), from the rule as docs/concepts.md states it: submits in
order; one that comes before the open window's start joins it (its run
starts ``wait`` after it, never later than ``max_wait`` after the window's
first, never earlier than it already would); any other opens a window.

:func:`check` takes what every submit was answered (its handle's
``debounced``: run, place in its window, the time it was decided at) and
what every run did (the input it ran, when it started), rebuilds the order
the key's object took the submits in (windows by their first submit's time,
each by place), and asserts:

- each window's places are 1..n, each once: no submit's write was lost or
  counted twice;
- the model, fed those submits in that order at their times, makes exactly
  these windows, with these due times;
- each window's run ran exactly once, at or after its due time, with the
  input of its last submit (place n);
- every handle's result is its window's run's.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class Submit:
    """One submit as its caller saw it."""

    n: int
    """Its input (unique across the test)."""
    run: str
    place: int
    at: float
    result: str | None = None
    """What its handle answered (None: not awaited)."""


@dataclass(frozen=True)
class Ran:
    """One execution of a run's code."""

    run: str
    n: int
    started: float


def model(times: list[float], wait: float, max_wait: float | None) -> list[tuple[list[int], float]]:
    """The windows the rule makes of submits at ``times`` (in order): each
    as the indexes of its submits and its due time."""
    windows: list[tuple[list[int], float]] = []
    due = cap = -math.inf
    for index, at in enumerate(times):
        if windows and at < due:
            due = max(due, min(at + wait, cap))
            windows[-1] = (windows[-1][0] + [index], due)
        else:
            cap = math.inf if max_wait is None else at + max_wait
            due = min(at + wait, cap)
            windows.append(([index], due))
    return windows


def check(
    submits: list[Submit], ran: list[Ran], wait: float, max_wait: float | None
) -> dict[str, int]:
    """Assert what the module docstring says; returns figures for a report."""
    by_run: dict[str, list[Submit]] = defaultdict(list)
    for s in submits:
        by_run[s.run].append(s)
    for run, its in by_run.items():
        places = sorted(s.place for s in its)
        assert places == list(range(1, len(its) + 1)), f"run {run}: places {places}"
    order = sorted(by_run, key=lambda run: min(s.at for s in by_run[run]))
    taken = [s for run in order for s in sorted(by_run[run], key=lambda s: s.place)]
    made = model([s.at for s in taken], wait, max_wait)
    expected = [[taken[i].run for i in indexes] for indexes, _ in made]
    got = [[s.run for s in sorted(by_run[run], key=lambda s: s.place)] for run in order]
    assert got == expected, "the windows are not the ones the rule makes of these submits"
    executions: dict[str, list[Ran]] = defaultdict(list)
    for r in ran:
        executions[r.run].append(r)
    assert set(executions) == set(order), (
        f"runs that ran but no submit joined: {set(executions) - set(order)}; "
        f"windows whose run never ran: {set(order) - set(executions)}"
    )
    for run, (_, due) in zip(order, made, strict=True):
        (execution,) = executions[run]  # exactly once
        last = max(by_run[run], key=lambda s: s.place)
        assert execution.n == last.n, f"run {run} ran input {execution.n}, not the last {last.n}"
        assert execution.started >= due - 1e-6, f"run {run} started before its due time"
        for s in by_run[run]:
            assert s.result in (None, f"ran {last.n}"), f"submit {s.n} answered {s.result}"
    return {"submits": len(submits), "runs": len(order)}
