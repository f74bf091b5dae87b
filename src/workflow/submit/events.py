"""Sending an event to a run: what ``runner.send_event`` does.

An event is one object under the run's incarnation,
``events/<run_id>/<incarnation>/<name>/<seq>``, written create-if-absent
before the run is woken, so a run that waits for it (now or later, in any
process) finds it; the sequence part orders events of one name by the
sender's clock, and carries a random part so two senders never collide.
The run takes each event once (see :mod:`stepstone.execute.durable_waits`).

A send to a run that has finished, or that the queue does not hold, is
refused with :class:`~stepstone.errors.EventRefused`: nothing would ever
read it. A send that raised part way may have delivered: a caller that
retries it should make the payload say which send it is.
"""

from __future__ import annotations

from typing import Any

from stepstone.errors import EncodingError, EventRefused
from stepstone.records.codec import codec_for_type
from stepstone.records.envelope import Envelope
from stepstone.records.layout import event_seq, name_key
from stepstone.records.run_records import RunRecords
from stepstone.runtime.capabilities import Waking
from stepstone.runtime.clock import Clock
from stepstone.runtime.errors import MalformedPayload
from stepstone.runtime.queue import JobStatus, LeaseQueue


async def send_event(
    records: RunRecords, queue: LeaseQueue, clock: Clock, run_id: str, name: str, payload: Any
) -> None:
    """Deliver event ``name`` with ``payload`` to the live run ``run_id``, and wake it."""
    name_key(name)  # refuse a bad name before anything is written
    try:
        data = codec_for_type(type(payload)).encode(payload)
    except Exception as exc:  # pydantic raises several kinds for what it cannot encode
        raise EncodingError(
            f"the payload of event {name!r} cannot be stored: {exc}", job=run_id
        ) from exc
    finished = await records.outcome(run_id)
    if finished is not None:
        raise EventRefused(
            f"run {run_id} has finished ({finished.status.value}); event {name!r} not sent"
        )
    queued = await queue.get(run_id)
    if queued is None:
        raise EventRefused(f"no live run {run_id}; event {name!r} not sent")
    try:
        incarnation = Envelope.decode(queued.payload).incarnation
    except MalformedPayload as exc:
        raise EventRefused(f"run {run_id} cannot be read ({exc}); event {name!r} not sent") from exc
    key = records.layout.event(run_id, incarnation, name, event_seq(clock.now()))
    await records.store.put_if_absent(key, data)
    if isinstance(queue, Waking):
        await queue.wake(run_id, JobStatus.WAITING_FOR_EVENT)
