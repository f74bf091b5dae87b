"""The kit's moto server applies SQS's message changes one at a time, as SQS
does: moto alone, served from many threads, brought deleted messages back
(two DeleteMessageBatch requests at once, each writing back the list it
read) and handed one message to two receivers at once.

Many client threads here send, receive and delete at the same time, on the
server the whole suite uses (tests/conftest.py's ``moto_server``).
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytestmark = pytest.mark.slow

MESSAGES = 200
THREADS = 8


def _client(endpoint: str) -> Any:
    import boto3

    return boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1")


def _counts(sqs: Any, url: str) -> tuple[int, int]:
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return int(attrs[names[0]]), int(attrs[names[1]])


def test_concurrent_receives_and_deletes_lose_nothing_and_bring_nothing_back(
    moto_server: str,
) -> None:
    sqs = _client(moto_server)
    url = sqs.create_queue(QueueName=f"kit-{uuid.uuid4().hex[:12]}")["QueueUrl"]
    for start in range(0, MESSAGES, 10):
        entries = [{"Id": str(i), "MessageBody": f"m{start + i}"} for i in range(10)]
        sqs.send_message_batch(QueueUrl=url, Entries=entries)

    received: list[tuple[str, str]] = []  # (body, receipt)
    lock = threading.Lock()

    def receive() -> None:
        client = _client(moto_server)
        while True:
            with lock:
                if len(received) >= MESSAGES:
                    return
            got = client.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=600, WaitTimeSeconds=1
            ).get("Messages", [])
            with lock:
                received.extend((m["Body"], m["ReceiptHandle"]) for m in got)

    with ThreadPoolExecutor(THREADS) as pool:
        for done in [pool.submit(receive) for _ in range(THREADS)]:
            done.result()
    taken = Counter(body for body, _ in received)
    assert len(taken) == MESSAGES and max(taken.values()) == 1, "a message went to two receivers"

    def delete(batch: list[tuple[str, str]]) -> list[Any]:
        entries = [{"Id": str(i), "ReceiptHandle": receipt} for i, (_, receipt) in enumerate(batch)]
        failed: list[Any] = (
            _client(moto_server)
            .delete_message_batch(QueueUrl=url, Entries=entries)
            .get("Failed", [])
        )
        return failed

    def send(n: int) -> None:
        _client(moto_server).send_message(QueueUrl=url, MessageBody=f"new{n}")

    with ThreadPoolExecutor(THREADS) as pool:
        deletes = [pool.submit(delete, received[i : i + 10]) for i in range(0, MESSAGES, 10)]
        sends = [pool.submit(send, n) for n in range(20)]
        assert [f.result() for f in deletes] == [[]] * len(deletes)
        for f in sends:
            f.result()
    # Every delete held (none came back, in flight), every send landed.
    assert _counts(sqs, url) == (20, 0)


def test_a_long_poll_gets_what_comes_while_it_waits(moto_server: str) -> None:
    """A message sent during the poll, and one whose delay ends during it."""
    sqs = _client(moto_server)
    url = sqs.create_queue(QueueName=f"kit-{uuid.uuid4().hex[:12]}")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="delayed", DelaySeconds=2)
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20)
    assert [m["Body"] for m in got["Messages"]] == ["delayed"]

    answer: list[Any] = []
    polling = threading.Thread(
        target=lambda: answer.append(
            _client(moto_server).receive_message(QueueUrl=url, WaitTimeSeconds=20)
        )
    )
    polling.start()
    sqs.send_message(QueueUrl=url, MessageBody="sent")
    polling.join(60)
    [got] = answer
    assert [m["Body"] for m in got["Messages"]] == ["sent"]


def test_a_long_poll_with_nothing_to_bring_answers_empty(moto_server: str) -> None:
    sqs = _client(moto_server)
    url = sqs.create_queue(QueueName=f"kit-{uuid.uuid4().hex[:12]}")["QueueUrl"]
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)
