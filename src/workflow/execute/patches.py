"""Patches: a change to a job's code that runs already under way must not see.

``await ctx.patched("change-id")`` asks, at one point of a run, whether this
run takes the new path there. A run that reaches the point on code that has
the change takes it (True); a run whose recorded history already went past
that point without it (it got there on the old code) keeps the old path
(False), so its replay makes the calls it recorded. The answer is recorded
the first time it is given (``!patch.<change-id>@n``, a memo outside the
run's history: it takes no position, so the calls around it keep theirs
whichever path a run takes) and every replay gives it again.

Once no run that took the old path is left (``stepstone ls --patch
change-id`` lists the runs that may still), the old path goes and
``ctx.deprecate_patch("change-id")`` takes the place of the question: it
records True for new runs (so code still asking ``patched`` in a rolling
deploy agrees) and fails, as a divergence, a run that took the old path.
"""

from __future__ import annotations

from typing import Any

from stepstone.errors import NonDeterministicReplay
from stepstone.execute.branches import Branch
from stepstone.execute.memos import Memo
from stepstone.execute.scope import AttemptScope
from stepstone.records.calls import OUTSIDE_HISTORY
from stepstone.records.codec import codec_for_type
from stepstone.records.layout import place_of

PATCH = "patch"
"""The memos of patch decisions: ``!patch.<change-id>@n`` (PATCH_MEMO)."""

_DECISION = codec_for_type(Any)


async def patched(run: AttemptScope, change_id: str) -> bool:
    """Whether this run takes the new path of ``change_id`` here (see the
    module docstring); the first answer is recorded, and replays give it."""
    memo = _memo(run, change_id)
    found, recorded = await memo.lookup()
    if found:
        return bool(recorded["patched"])
    branch = run.branch_here()
    decision = {"patched": not _went_past(run, branch), **_where(run, branch)}
    return bool((await memo.record(decision))["patched"])


async def deprecate_patch(run: AttemptScope, change_id: str) -> None:
    """The new path of ``change_id`` is the only one: record so for a run
    that reaches this point (and agree with ``patched`` on code not yet
    deployed); NonDeterministicReplay for a run that took the old path."""
    memo = _memo(run, change_id)
    found, recorded = await memo.lookup()
    branch = run.branch_here()
    if not found:
        if not _went_past(run, branch):
            await memo.record({"patched": True, **_where(run, branch)})
            return
    elif recorded["patched"]:
        return
    run.diverged_at = memo.segment
    run.diverged = NonDeterministicReplay(
        run.run_id,
        run.kind,
        branch.calls + 1,
        f"the old path of patch {change_id!r}",
        f"only its new path (deprecate_patch({change_id!r}))",
        branch=branch.name,
        recorded_by=recorded.get("by") if found and isinstance(recorded, dict) else None,
    )
    raise run.diverged


def _where(run: AttemptScope, branch: Branch) -> dict[str, Any]:
    """Where a decision was taken (the calls its branch had made, the
    branch), and by which code version."""
    return {
        "at": branch.calls,
        "br": list(branch.path),
        "by": run.code_version,
        "t": run.clock.now(),
    }


def _memo(run: AttemptScope, change_id: str) -> Memo:
    if not isinstance(change_id, str) or not change_id:
        raise ValueError("a patch's change id must be a non-empty str")
    return Memo(run, change_id, _DECISION, internal=PATCH, positioned=False)


def _went_past(run: AttemptScope, branch: Branch) -> bool:
    """Whether the run's recorded history holds a call after this point of
    ``branch``: a later call of the branch, or one of a branch it created
    later (or of theirs). It got past this point before, without the patch.
    (In a run recorded before branches existed every call is the root's.)"""
    keys = run.memo_keys
    if not keys:
        return False
    here, depth = branch.path, len(branch.path)
    for segment in keys:
        place = place_of(segment)
        if place is not None:
            path, position = place
            if path == here and position > branch.calls:
                return True
            if len(path) > depth and path[:depth] == here and path[depth] > branch.children:
                return True
        elif not segment.startswith(OUTSIDE_HISTORY) and segment not in run.replayed:
            return True  # (a call recorded by name, before positions, not replayed yet)
    return False
