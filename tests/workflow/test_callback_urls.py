"""Callbacks completed through their presigned URLs on S3 (moto's server),
with plain HTTP as ``curl -X PUT --data @body.json URL`` sends it: no
credentials, no stepstone anywhere on the caller's side.

The workers find such a completion by looking at the listing of
completions (``callback_look``), or at once through the bucket's event
notifications on SQS (``callback_notices``). moto neither checks a
presigned URL's signature nor its expiry: what S3 does with an expired URL
is S3's (docs/streams.md); the URL's lifetime is checked here as the URL
states it.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from talk_jobs import TALK_JOBS, AwaitsCallback
from wf_jobs import Counters

from stepstone import JobRunner, JobStatus
from stepstone.records.callbacks import CallbackId
from stepstone.testing import wait_until

DONE = 30.0
PREFIX_RULE = {"Name": "prefix", "Value": "p/callbacks/"}
"""The notifications of the completions of a runner on prefix ``p``."""


@pytest.fixture
async def worker(s3_url: str, counters: Counters) -> AsyncIterator[JobRunner]:
    runner = JobRunner(
        s3_url, jobs=TALK_JOBS, state=[counters], poll_interval=0.05, callback_look=0.2
    )
    async with runner:
        yield runner


async def waiting(runner: JobRunner, run_id: str) -> bool:
    state = await runner.status(run_id)
    return state is not None and state.status is JobStatus.WAITING_FOR_CALLBACK


async def made(runner: JobRunner, counters: Counters, job: AwaitsCallback) -> tuple[str, str]:
    """Submit ``job`` and wait until it waits; its run id and the callback's URL."""
    handle = await runner.submit(job)
    await wait_until(lambda: waiting(runner, handle.id), message="the run waits", timeout=DONE)
    (url,) = {sent[3] for sent in counters.sent if sent[0] == job.order}
    assert url is not None
    return handle.id, url


def put(url: str, body: Any, **headers: str) -> httpx.Response:
    """``curl -X PUT --data @body.json URL``: a plain PUT of the JSON body."""
    return httpx.put(url, content=json.dumps(body).encode(), headers=headers)


async def test_a_plain_put_to_the_url_completes_the_callback(
    worker: JobRunner, counters: Counters, s3_admin: Any, s3_bucket: str
) -> None:
    started = time.time()
    run_id, url = await made(worker, counters, AwaitsCallback(order="u", timeout=3600))
    query = parse_qs(urlsplit(url).query)
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"], "not a SigV4 presigned URL"
    lifetime = int(query["X-Amz-Expires"][0])
    assert 3600 - (time.time() - started) - 5 <= lifetime <= 3600, "valid until the timeout"
    assert urlsplit(url).path.endswith(
        "/callbacks/" + "/".join(str(CallbackId.parse(counters.sent[-1][2])).split("-", 2))
    )
    answer = put(url, {"approved": True, "by": "curl"})
    assert answer.status_code == 200, answer.text
    said = await worker.handle(run_id, AwaitsCallback).result(timeout=DONE)
    assert said == "approved by curl"
    left = s3_admin.list_objects_v2(Bucket=s3_bucket, Prefix="t/callbacks/")
    assert left.get("KeyCount", 0) == 0, "the completion taken was not tidied away"


async def test_a_second_put_is_refused_with_if_none_match_or_ignored_and_said(
    worker: JobRunner, counters: Counters, caplog: pytest.LogCaptureFixture
) -> None:
    # With If-None-Match: * (curl -H 'If-None-Match: *'), S3 refuses a second PUT.
    run_id, url = await make_parked(worker, counters, "v")
    assert put(url, {"approved": True, "by": "first"}, **{"If-None-Match": "*"}).status_code == 200
    refused = put(url, {"approved": False, "by": "second"}, **{"If-None-Match": "*"})
    assert refused.status_code == 412, refused.text
    await unpark(worker)
    assert await worker.handle(run_id, AwaitsCallback).result(timeout=DONE) == "approved by first"

    # Without it, a PUT after the run took the first is ignored, and the worker says so.
    with caplog.at_level(logging.WARNING, logger="stepstone"):
        assert put(url, {"approved": False, "by": "late"}).status_code == 200
        await wait_until(
            lambda: "completed again after its run took a completion" in caplog.text,
            message="the watch says the late completion is ignored",
            timeout=DONE,
        )
    assert url not in caplog.text, "a callback's URL (a credential) was logged"
    outcome = await worker.handle(run_id, AwaitsCallback).join(timeout=DONE)
    assert outcome.result == "approved by first"


async def make_parked(runner: JobRunner, counters: Counters, order: str) -> tuple[str, str]:
    """A run waiting for its callback while the worker looks for no completion."""
    run_id, url = await made(runner, counters, AwaitsCallback(order=order))
    watch = runner._callback_watch
    assert watch is not None
    await watch.stop()
    return run_id, url


async def unpark(runner: JobRunner) -> None:
    watch = runner._callback_watch
    assert watch is not None
    watch.start()


async def test_a_completion_put_while_no_worker_runs_is_found_when_one_starts(
    s3_url: str, counters: Counters
) -> None:
    async with JobRunner(
        s3_url, jobs=TALK_JOBS, state=[counters], poll_interval=0.05, callback_look=None
    ) as first:
        run_id, url = await made(first, counters, AwaitsCallback(order="w"))
    assert put(url, {"approved": True, "by": "while down"}).status_code == 200
    async with JobRunner(
        s3_url, jobs=TALK_JOBS, state=[counters], poll_interval=0.05, callback_look=0.2
    ) as second:
        said = await second.handle(run_id, AwaitsCallback).result(timeout=DONE)
    assert said == "approved by while down"


async def test_s3_event_notifications_on_sqs_make_a_put_reach_the_run_at_once(
    moto_server: str, s3_admin: Any, s3_bucket: str, counters: Counters
) -> None:
    import boto3

    sqs = boto3.client("sqs", endpoint_url=moto_server, region_name="us-east-1")
    queue = sqs.create_queue(QueueName=f"callbacks-{uuid.uuid4().hex[:12]}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    s3_admin.put_bucket_notification_configuration(
        Bucket=s3_bucket,
        NotificationConfiguration={
            "QueueConfigurations": [
                {
                    "QueueArn": arn,
                    "Events": ["s3:ObjectCreated:*"],
                    "Filter": {"Key": {"FilterRules": [PREFIX_RULE]}},
                }
            ]
        },
    )
    url = f"s3://{s3_bucket}/p?endpoint_url={moto_server}&region=us-east-1"
    # The listing is looked at once an hour: only the notice can wake the run in time.
    async with JobRunner(
        url,
        jobs=TALK_JOBS,
        state=[counters],
        poll_interval=0.05,
        callback_look=3600,
        callback_notices=queue,
    ) as runner:
        run_id, callback_url = await made(runner, counters, AwaitsCallback(order="x"))
        assert put(callback_url, {"approved": True, "by": "notice"}).status_code == 200
        said = await runner.handle(run_id, AwaitsCallback).result(timeout=DONE)
    assert said == "approved by notice"
