"""Fairness keys on SQS: SQS cannot reorder a queue, so an SqsQueue names
each job's tenant to SQS instead, as the ``MessageGroupId`` of every message
it sends for the job (its enqueue and every re-send: a retry, a run-at past
the delay cap). On a standard queue that is what SQS's fair queues go by
(moto keeps the attribute but does not reorder; AWS does)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from stepstone.runtime.decision import Retry
from stepstone.runtime.fairness import fairness_headers
from stepstone.runtime.queue import Delivery
from stepstone.runtime.sqs import SqsQueue
from stepstone.testing import wait_until


@pytest.fixture
async def queue(moto_server: str) -> AsyncIterator[SqsQueue]:
    q = await SqsQueue.create(
        f"t-{uuid.uuid4().hex[:16]}",
        endpoint_url=moto_server,
        region="us-east-1",
        id_store=None,
        wait_time_seconds=0,
    )
    yield q
    await q.close()


def raw_messages(moto_server: str, name: str) -> list[dict[str, Any]]:
    """The normal tier's messages as a plain client sees them (hidden for 1 s)."""
    import boto3

    client = boto3.client("sqs", endpoint_url=moto_server, region_name="us-east-1")
    url = client.get_queue_url(QueueName=f"{name}-normal")["QueueUrl"]
    got = client.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=10,
        VisibilityTimeout=1,
        MessageSystemAttributeNames=["MessageGroupId"],
    )
    messages: list[dict[str, Any]] = got.get("Messages", [])
    return messages


async def test_a_jobs_fairness_key_is_its_message_group(queue: SqsQueue, moto_server: str) -> None:
    await queue.enqueue(b"a", id="a", headers=fairness_headers("tenant-a", 3))
    await queue.enqueue(b"n", id="n")
    await queue.close()  # (sends what the batcher holds)
    groups = {
        m["Body"]: m.get("Attributes", {}).get("MessageGroupId")
        for m in raw_messages(moto_server, queue.name)
    }
    assert sorted(groups.values(), key=str) == [None, "tenant-a"]


async def test_a_retry_is_re_sent_in_its_group(queue: SqsQueue, moto_server: str) -> None:
    await queue.enqueue(b"a", id="a", headers=fairness_headers("tenant-a", None))
    got: list[Delivery] = []

    async def claimed() -> bool:
        got.extend(await queue.claim(1, lease=30))
        return bool(got)

    await wait_until(claimed, timeout=10)
    [d] = got
    assert d.headers == {"stepstone.fairness_key": "tenant-a"}
    await queue.settle(d, Retry(0.0, error="again"))
    await queue.close()
    [m] = raw_messages(moto_server, queue.name)
    assert m["Attributes"]["MessageGroupId"] == "tenant-a"
