"""The dead-letter queue, and bringing jobs back from it.

A job dies by being sent to ``<name>-dead`` with its reason in the message
(:attr:`JobMessage.dead_reason`); the tier queues' RedrivePolicy also sends
there, as a last-resort net, any message received too many times. SQS cannot
find a message by id, so bringing a job back is a scan: receive batches of
10, each hidden for a while so the scan moves on, hand each job message that
matches to the queue, and give the rest back at the end. That costs about 2
requests per 10 dead messages looked at.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from .client import SqsClient
from .limits import SQS_MAX_BATCH
from .message import JobMessage, MalformedMessage, decode

Take = Callable[[JobMessage, str, int], Awaitable[bool]]
"""``take(message, receipt, receives)``: deal with a matching dead message
(move it back or drop it, deleting it from the dead-letter queue either
way); True when it was moved back."""


async def scan(
    sqs: SqsClient,
    url: str,
    *,
    visibility: int,
    match: Callable[[JobMessage], bool],
    take: Take,
    stop_at_first: bool,
) -> int:
    """Look at every message in the dead-letter queue at ``url`` once, each
    hidden ``visibility`` seconds; hand the job messages that ``match`` to
    ``take``. Messages that are not a job's, and those that do not match,
    are made visible again when the scan ends. Returns how many were moved."""
    skipped: list[str] = []
    moved = 0
    try:
        while True:
            response = await sqs.call(
                "receive_message",
                QueueUrl=url,
                MaxNumberOfMessages=SQS_MAX_BATCH,
                VisibilityTimeout=visibility,
                WaitTimeSeconds=1,
                MessageSystemAttributeNames=["ApproximateReceiveCount"],
            )
            messages = response.get("Messages", [])
            if not messages:
                return moved
            for message in messages:
                receipt: str = message["ReceiptHandle"]
                try:
                    job = decode(message["Body"])
                except MalformedMessage:
                    job = None
                if job is None or not match(job):
                    skipped.append(receipt)
                    continue
                receives = int(message.get("Attributes", {}).get("ApproximateReceiveCount", 1))
                if await take(job, receipt, receives):
                    moved += 1
                    if stop_at_first:
                        return moved
    finally:
        for start in range(0, len(skipped), SQS_MAX_BATCH):
            chunk = skipped[start : start + SQS_MAX_BATCH]
            await sqs.call(
                "change_message_visibility_batch",
                QueueUrl=url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": r, "VisibilityTimeout": 0}
                    for i, r in enumerate(chunk)
                ],
            )


def revived(message: JobMessage, receives: int, now: float) -> JobMessage:
    """A dead job as it goes back to its tier: due now, attempts and lapses reset, the
    death forgotten. Claims keep counting, this scan's receives included
    (over-counting is safe: it only makes the workflow layer look for memos)."""
    return dataclasses.replace(
        message,
        attempts=0,
        lapses=0,
        claims=message.claims + receives,
        run_at=now,
        last_error=None,
        dead_reason=None,
        died_at=None,
    )
