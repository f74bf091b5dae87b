"""``ctx.set_attributes``: attributes a run sets as it runs.

The call takes a place in the run's history, as a step does: its memo
records the attributes set (and the values they replaced), so a retry or a
replay reads them back and agrees with the run that set them, and a replay
that sets them elsewhere diverges (:mod:`stepstone.execute.memos`).

Before the memo, each new attribute's mark is written among the run's memos
and then its index entry (:mod:`stepstone.records.attributes`), and a value
replaced loses its entry and then its mark. A crash anywhere before the
memo is mended by the retry, which makes the call again from the same
attributes (those the replay of the calls before it restored) and so writes
and deletes the same objects; once the memo stands, the index holds what it
records. A live run is found by the values it has, not by those it had.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from stepstone.errors import InvalidAttribute
from stepstone.execute.memos import Memo
from stepstone.execute.scope import AttemptScope
from stepstone.records import fingerprint
from stepstone.records.attributes import (
    MAX_ATTRIBUTES,
    check_attributes,
    drop_entries,
    mark_segment,
    write_entries,
)
from stepstone.records.codec import codec_for_type
from stepstone.store import AlreadyExists, NewObject

_RECORDED = codec_for_type(dict[str, dict[str, str]])
"""A call's memo: ``{"set": {...}, "replaced": {...}}``."""


async def set_attributes(run: AttemptScope, attributes: Mapping[str, str]) -> None:
    """Give the run ``attributes`` (a name it had already takes the new
    value): see the module docstring."""
    checked = check_attributes(attributes, where="ctx.set_attributes")
    memo = Memo(run, "", _RECORDED, internal="attributes", args=fingerprint.of((checked,), {}))
    found, recorded = await memo.lookup()
    if found:
        if run.replay_of is not None:
            # (copied from the run this one replays: its index is this
            # incarnation's to write, in the order the calls made it)
            await _apply(run, recorded["set"], recorded["replaced"])
        run.attributes.update(recorded["set"])
        return
    merged = {**run.attributes, **checked}
    if len(merged) > MAX_ATTRIBUTES:
        raise InvalidAttribute(
            f"ctx.set_attributes: the run would have {len(merged)} attributes; "
            f"at most {MAX_ATTRIBUTES} are allowed"
        )
    new = {name: value for name, value in checked.items() if run.attributes.get(name) != value}
    replaced = {name: run.attributes[name] for name in new if name in run.attributes}
    await _apply(run, new, replaced)
    recorded = await memo.record({"set": checked, "replaced": replaced})
    run.attributes.update(recorded["set"])


async def _apply(run: AttemptScope, new: Mapping[str, str], replaced: Mapping[str, str]) -> None:
    """Write the marks of ``new``, then their index entries; then delete
    the entries of the values ``replaced``, then their marks."""
    layout, store = run.layout, run.store
    if new:
        marks = [
            NewObject(layout.memo(run.run_id, run.incarnation, mark_segment(name, value)), b"")
            for name, value in new.items()
        ]
        for result in await store.put_many_if_absent(marks):
            if isinstance(result, Exception) and not isinstance(result, AlreadyExists):
                raise result
        await write_entries(store, layout, [(run.run_id, run.incarnation, new)])
    if replaced:
        await drop_entries(store, layout, run.run_id, run.incarnation, replaced.items())
        gone = [
            layout.memo(run.run_id, run.incarnation, mark_segment(name, value))
            for name, value in replaced.items()
        ]
        await asyncio.gather(*(store.delete(key) for key in gone))
