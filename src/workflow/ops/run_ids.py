"""Finding a run from what an operator types: a run id, a unique start of
one, or the idempotency key it was submitted with (``stepstone show``, the
web view's search box)."""

from __future__ import annotations

import asyncio
import contextlib
import re

from stepstone.errors import InspectError
from stepstone.ops.reads import Inspected, read_outcome, read_queued
from stepstone.records.layout import check_run_id, run_id_for_key
from stepstone.runtime.capabilities import JobListing

CANDIDATES = 5
"""Ids an ambiguous prefix names in its error."""
WHOLE_ID_LENGTHS = (32, 64)
"""The lengths of a whole run id: a random one, and a key's SHA-256."""

_ID_PREFIX = re.compile(r"[0-9a-f]{4,64}")


class AmbiguousId(InspectError):
    """An id prefix that starts several run ids."""


async def resolve_id(runner: Inspected, prefix: str) -> str:
    """The id of the one run whose id is or starts with ``prefix`` (4 or more
    hex digits), for ``stepstone show``.

    It looks among outcome records (a LIST) and queue records (a page of the
    queue's listing, from where the prefix would sort); an id of a whole
    run id's length (32 or 64 digits) is taken as it is. Raises InspectError
    when the prefix names several runs (naming a few) or none. A whole id
    found nowhere is returned as it is, for :func:`detail` to look further
    (a run's leftover memos) or say it knows no such job.
    """
    if not _ID_PREFIX.fullmatch(prefix):
        raise InspectError(
            f"not a run id or id prefix: {prefix[:80]!r} (expected 4 to 64 lowercase hex digits)"
        )
    if len(prefix) in WHOLE_ID_LENGTHS:
        return prefix  # (a whole id: nothing to look up, and no listing to pay for)
    outcomes = await runner.store.list(runner.layout.outcome(prefix), limit=CANDIDATES + 1)
    found = {runner.layout.run_id_of_outcome(info.key) for info in outcomes}
    queue = runner.queue
    if isinstance(queue, JobListing):
        page = await queue.list(cursor=_just_before(prefix), limit=CANDIDATES + 1)
        found.update(record.id for record in page.records if record.id.startswith(prefix))
    if prefix in found or len(found) == 1:
        return prefix if prefix in found else found.pop()
    if not found:
        with contextlib.suppress(ValueError):
            return check_run_id(prefix)
        raise InspectError(f"no run id starts with {prefix} in {runner.store.location}")
    some = sorted(found)[:CANDIDATES]
    shown = ", ".join(run_id[: len(prefix) + 8] + "…" for run_id in some)
    more = ", and more" if len(found) > len(some) else ""
    raise AmbiguousId(f"{prefix} names more than one run ({shown}{more}); give more of the id")


async def find_run(runner: Inspected, text: str) -> str | None:
    """The run ``text`` names, as the web view's search box takes it: a run
    id, a unique start of one (see :func:`resolve_id`), or the idempotency
    key it was submitted with; None when it names no run. Raises
    InspectError when it is the start of several run ids.

    Hex text is tried as an id first and then as a key (a key may look like
    hex). What it costs: for an id prefix a LIST of outcomes and a page of
    the queue's listing; then a queue GET and an outcome GET per candidate.
    """
    text = text.strip()
    candidates: list[str] = []
    if _ID_PREFIX.fullmatch(text):
        try:
            candidates.append(await resolve_id(runner, text))
        except AmbiguousId:
            raise
        except InspectError:
            pass  # no run id starts so: it may be a key
    if text:
        candidates.append(run_id_for_key(text))
    for run_id in candidates:
        if await _exists(runner, run_id):
            return run_id
    return None


async def _exists(runner: Inspected, run_id: str) -> bool:
    """Whether the queue or an outcome record holds the run (a record that
    will not decode counts: its page names it)."""
    queued, outcome = await asyncio.gather(
        read_queued(runner, run_id), read_outcome(runner, run_id)
    )
    return queued is not None or outcome is not None


def _just_before(prefix: str) -> str | None:
    """A listing cursor after which the first ids are those starting with
    ``prefix`` (a queue lists ids after its cursor, in order)."""
    head, last = prefix[:-1], prefix[-1]
    if last == "0":
        return head or None
    # '~' sorts after every character an id may hold.
    return head + chr(ord(last) - 1) + "~"
