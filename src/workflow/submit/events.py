"""Sending an event to a run: what ``runner.send_event`` does.

An event is one object under the run's incarnation,
``events/<run_id>/<incarnation>/<name>/<seq>``, written create-if-absent
before the run is woken, so a run that waits for it (now or later, in any
process) finds it; the sequence part orders events of one name by the
sender's clock, and carries a random part so two senders never collide.
The run takes each event once (see :mod:`stepstone.execute.durable_waits`).

A send to a run that has finished, or that the queue does not hold, is
refused with :class:`~stepstone.errors.EventRefused`: nothing would ever
read it. A send that raised part way may have delivered. A send with a
``key`` (a webhook's delivery id) is one event however often it is
retried: the key's first send records the sequence part it chose, at
``events/<run_id>/<incarnation>/!sent/<digest>`` (``!`` never starts an
event name's segment), before it writes the event, and every send with the
key writes the event under that sequence, create-if-absent.
"""

from __future__ import annotations

import re
from typing import Any

from stepstone.errors import EncodingError, EventRefused
from stepstone.records.codec import codec_for_type, sha256_hex
from stepstone.records.envelope import Envelope
from stepstone.records.layout import event_seq, name_key
from stepstone.records.run_records import RunRecords
from stepstone.runtime.capabilities import Waking
from stepstone.runtime.clock import Clock
from stepstone.runtime.errors import MalformedPayload
from stepstone.runtime.queue import LeaseQueue
from stepstone.runtime.status import JobStatus
from stepstone.store import AlreadyExists

_SEQ = re.compile(r"^[0-9]{20}-[0-9a-f]{8}$")
"""What :func:`~stepstone.records.layout.event_seq` makes."""


async def send_event(
    records: RunRecords,
    queue: LeaseQueue,
    clock: Clock,
    run_id: str,
    name: str,
    payload: Any,
    key: str | None = None,
) -> bool:
    """Deliver event ``name`` with ``payload`` to the live run ``run_id``, and
    wake it; True. With ``key``, once: False if a send of ``name`` with that
    key had delivered it (whose payload stands)."""
    name_key(name)  # refuse a bad name before anything is written
    if key is not None and (not isinstance(key, str) or not key):
        raise TypeError(f"an event's key is a non-empty str, not {key!r}")
    try:
        data = records.payloads.seal_bytes(codec_for_type(type(payload)).encode(payload))
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
    seq = event_seq(clock.now())
    if key is not None:
        seq = await _sequence_of(records, run_id, incarnation, name, key, seq)
    event = records.layout.event(run_id, incarnation, name, seq)
    delivered = True
    try:
        await records.store.put_if_absent(event, data)
    except AlreadyExists:
        delivered = False  # a keyed send's retry: an earlier send delivered it
    if isinstance(queue, Waking):
        await queue.wake(run_id, JobStatus.WAITING_FOR_EVENT)
    return delivered


async def _sequence_of(
    records: RunRecords, run_id: str, incarnation: str, name: str, key: str, seq: str
) -> str:
    """The sequence part of the event ``name`` sent with ``key``: ``seq``, now
    recorded for the key, or the one the key's first send recorded. Recorded
    before the event is written, so a send that failed between the two
    writes its event under the same name when retried."""
    digest = sha256_hex(name.encode(), key.encode())
    marker = records.layout.event_sent(run_id, incarnation, digest)
    try:
        await records.store.put_if_absent(marker, seq.encode())
        return seq
    except AlreadyExists:
        pass
    recorded = (await records.store.get(marker)).data.decode(errors="replace")
    if not _SEQ.match(recorded):
        raise EventRefused(
            f"run {run_id}: the record of the sends of event {name!r} with key {key!r} "
            f"({marker}) does not hold a sequence ({recorded[:40]!r}); event not sent"
        )
    return recorded
