"""Completing a callback: what ``runner.complete_callback`` does.

The callback's id names its run, incarnation and place
(:mod:`stepstone.records.callbacks`). A completion is refused, with
:class:`~stepstone.errors.CallbackRefused` saying why, when it could never
be taken: the id names no callback of a live run (never made, the run
finished, swept, or started again as another incarnation), the callback's
timeout has passed or its wait recorded it, or the value is over
:data:`~stepstone.records.callbacks.MAX_BODY` as JSON. Otherwise the value
is written as JSON, create-if-absent, at the callback's completion key, and
the run is woken (:class:`~stepstone.runtime.capabilities.Waking`).

The first completion wins: a completion that finds one there (put by this
call's like, or through the callback's URL), or finds the wait has taken
one, changes nothing and answers False. A completion that lands as the wait
takes another is found by looking at the wait's record after writing, and
removed again.
"""

from __future__ import annotations

import contextlib
from typing import Any

from pydantic_core import to_json

from stepstone.errors import CallbackRefused, EncodingError
from stepstone.records.callbacks import MAX_BODY, CallbackId, Taken, expiry_of
from stepstone.records.calls import PositionedMemo
from stepstone.records.codec import unpack_stored
from stepstone.records.envelope import incarnation_of
from stepstone.records.run_records import RunRecords
from stepstone.runtime.capabilities import Waking
from stepstone.runtime.clock import Clock
from stepstone.runtime.queue import LeaseQueue
from stepstone.runtime.status import JobStatus
from stepstone.store import AlreadyExists, NotFound, PreconditionFailed


async def complete_callback(
    records: RunRecords, queue: LeaseQueue, clock: Clock, callback_id: str, value: Any
) -> bool:
    """Complete the callback ``callback_id`` with ``value`` (sent as JSON) and
    wake its run: True; False if it had been completed already (the first
    completion stands). Raises CallbackRefused when it cannot take one,
    EncodingError for a value that is not JSON-able."""
    try:
        callback = CallbackId.parse(callback_id)
    except ValueError as exc:
        raise CallbackRefused(str(exc)) from None
    try:
        body = to_json(value)
    except Exception as exc:  # pydantic raises several kinds for what it cannot encode
        raise EncodingError(
            f"the value for callback {callback} cannot be sent: {exc}", job=callback.run_id
        ) from exc
    if len(body) > MAX_BODY:
        raise CallbackRefused(
            f"callback {callback}: the value is {len(body)} bytes as JSON, over the "
            f"{MAX_BODY} a completion may have; nothing was completed"
        )
    await _check_open(records, queue, clock, callback)
    store, layout = records.store, records.layout
    taken = await _taken(records, callback)
    if taken is not None:
        return _answer_taken(callback, taken)
    completion = callback.completion(layout)
    try:
        etag = await store.put_if_absent(completion, records.payloads.seal_bytes(body))
    except AlreadyExists:
        return False
    taken = await _taken(records, callback)  # (the wait may have taken another meanwhile)
    if taken is not None and taken.etag != etag:
        with contextlib.suppress(PreconditionFailed, NotFound):
            await store.delete(completion, if_match=etag)
        return _answer_taken(callback, taken)
    if isinstance(queue, Waking):
        await queue.wake(callback.run_id, JobStatus.WAITING_FOR_CALLBACK)
    return True


async def _check_open(
    records: RunRecords, queue: LeaseQueue, clock: Clock, callback: CallbackId
) -> None:
    """Refuse (CallbackRefused) a completion that no wait could take."""
    run_id = callback.run_id
    finished = await records.outcome(run_id)
    if finished is not None:
        raise CallbackRefused(
            f"callback {callback}: run {run_id} has finished ({finished.status.value}); "
            "nothing was completed"
        )
    queued = await queue.get(run_id)
    if queued is None:
        raise CallbackRefused(f"callback {callback}: no live run {run_id}; nothing was completed")
    if incarnation_of(queued.payload) != callback.incarnation:
        raise CallbackRefused(
            f"callback {callback}: it belongs to an earlier run of {run_id}, which has "
            "ended; nothing was completed"
        )
    key = records.layout.memo(run_id, callback.incarnation, callback.segment)
    try:
        memo = PositionedMemo.decode((await records.store.get(key)).data)
    except NotFound:
        raise CallbackRefused(
            f"callback {callback}: run {run_id} has made no callback there (yet); "
            "nothing was completed"
        ) from None
    except ValueError as exc:
        raise CallbackRefused(
            f"callback {callback}: its record cannot be read ({exc}); nothing was completed"
        ) from None
    if memo.call.call != "callback":
        raise CallbackRefused(f"callback {callback}: it names no callback of run {run_id}")
    try:
        expires = expiry_of(unpack_stored(memo.value))
    except ValueError as exc:
        raise CallbackRefused(f"callback {callback}: its record cannot be read ({exc})") from None
    if expires is not None and clock.now() >= expires:
        raise CallbackRefused(
            f"callback {callback} ({memo.call.name!r}) expired; nothing was completed"
        )


async def _taken(records: RunRecords, callback: CallbackId) -> Taken | None:
    """What the callback's wait took, if it took anything yet."""
    try:
        data = (await records.store.get(callback.taken(records.layout))).data
    except NotFound:
        return None
    try:
        return Taken.decode(data)
    except ValueError as exc:
        raise CallbackRefused(
            f"callback {callback}: the record of what its wait took cannot be read ({exc})"
        ) from None


def _answer_taken(callback: CallbackId, taken: Taken) -> bool:
    """False for a callback whose wait took a completion; CallbackRefused
    for one that expired."""
    if taken.took == "expired":
        raise CallbackRefused(f"callback {callback} expired; nothing was completed")
    return False
