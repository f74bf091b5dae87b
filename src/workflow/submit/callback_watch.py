"""The look for callbacks completed through their URLs, in each worker.

A PUT to a callback's presigned URL (:mod:`stepstone.execute.callbacks`)
reaches the bucket and nothing else: no process of ours hears of it. So a
worker on a store that presigns (S3) looks for completions, every ``every``
seconds: one LIST of ``callbacks/`` (a page per thousand completions not
taken yet: a wait that takes one deletes it), and for each completion it
has not seen, a GET of the record of what its callback's wait took and a
wake of its run (:class:`~stepstone.runtime.capabilities.Waking`; the run,
suspended waiting for the callback, is due at once and a worker claims it).
So a completion through a URL reaches its run within ``every`` seconds (5
by default) and a claim. What it costs: a LIST per look per worker (720
an hour at 5 s, $0.0036 at S3's $0.005 per thousand), and two requests per
completion.

To hear of a completion at once, point the bucket's event notifications
(``s3:ObjectCreated:*`` under the runner's prefix and ``callbacks/``) at an
SQS queue and give the runner that queue (``callback_notices``): the watch
then long-polls it (one ReceiveMessage per 20 s while idle: 180 an hour,
$0.00007 at SQS's $0.40 a million; a receive and a delete per notice),
handles each completion it names at once, and looks at the listing only
every ``NOTICED_EVERY`` seconds, in case a notice was lost (docs/streams.md
says how to set it up).

A completion found whose callback's wait took another (a second PUT to the
URL after the first was taken) is ignored: the watch logs it (the
callback's id, the body's size and etag; never the body, never a URL) and
deletes it. One left behind by a wait cut short before it deleted what it
took is deleted quietly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Iterable
from urllib.parse import unquote_plus, urlsplit

from stepstone.records.callbacks import CallbackId, Taken
from stepstone.records.layout import Layout
from stepstone.runtime.capabilities import Waking
from stepstone.runtime.sqs.client import SqsClient
from stepstone.runtime.status import JobStatus
from stepstone.store import NotFound, ObjectStore, PreconditionFailed

log = logging.getLogger("stepstone")

EVERY = 5.0
"""Seconds between two looks at the listing of completions, by default."""
NOTICED_EVERY = 60.0
"""... and with SQS notices of completions: only in case one was lost."""
NOTICE_WAIT = 20
"""Seconds one ReceiveMessage of the notices queue waits for a message (SQS's longest)."""

_TAIL = re.compile(r"(?:^|/)callbacks/([0-9a-f]{8,64})/([0-9a-f]{16})/([^/]+)$")


class CallbackWatch:
    """Looks for completions of callbacks under ``layout`` in ``store`` every
    ``every`` seconds, and wakes their runs through ``waking``; with
    ``notices`` (an SQS queue URL of the bucket's event notifications), also
    as each is put."""

    def __init__(
        self,
        store: ObjectStore,
        layout: Layout,
        waking: Waking,
        *,
        every: float = EVERY,
        notices: str | None = None,
    ) -> None:
        if not every > 0:
            raise ValueError(f"the look for completed callbacks takes seconds > 0, not {every!r}")
        self._store = store
        self._layout = layout
        self._waking = waking
        self._every = every if notices is None else max(every, NOTICED_EVERY)
        self._notices = notices
        self._sqs = None if notices is None else _client_for(notices)
        self._seen: dict[str, str] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._looking(), name="stepstone-callback-watch")]
        if self._notices is not None:
            self._tasks.append(loop.create_task(self._hearing(), name="stepstone-callback-notices"))

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._sqs is not None:
            await self._sqs.close()

    async def _looking(self) -> None:
        while True:
            try:
                await self.look()
            except Exception as exc:
                log.warning("the look for completed callbacks failed (will look again): %s", exc)
            await asyncio.sleep(self._every)

    async def look(self) -> int:
        """Look at the listing of completions once; wake the runs of those
        not seen before. Returns how many runs it woke."""
        prefix = self._layout.callbacks()
        listed = {info.key: info.etag async for info in self._store.scan(prefix)}
        fresh = [key for key, etag in listed.items() if self._seen.get(key) != etag]
        self._seen = listed
        return await self._handle(fresh)

    async def _hearing(self) -> None:
        assert self._sqs is not None and self._notices is not None
        while True:
            try:
                answer = await self._sqs.call(
                    "receive_message",
                    QueueUrl=self._notices,
                    MaxNumberOfMessages=10,
                    WaitTimeSeconds=NOTICE_WAIT,
                )
                messages = answer.get("Messages", [])
                keys = [key for message in messages for key in _keys_in(message.get("Body"))]
                await self._handle(keys)
                for message in messages:
                    await self._sqs.call(
                        "delete_message",
                        QueueUrl=self._notices,
                        ReceiptHandle=message["ReceiptHandle"],
                    )
            except Exception as exc:
                log.warning("callback notices from %s failed (will retry): %s", self._notices, exc)
                await asyncio.sleep(self._every / 10)

    async def _handle(self, keys: Iterable[str]) -> int:
        """Wake the run of each completion at ``keys`` (full keys of the
        store, or of the bucket) whose callback's wait took none yet."""
        woken = 0
        for key in keys:
            found = _TAIL.search(key)
            if found is None:
                continue
            callback = CallbackId(found[1], found[2], found[3])
            completion = callback.completion(self._layout)
            if not key.endswith(completion):
                continue  # (another runner's, under another prefix)
            try:
                woken += await self._completed(callback, completion)
            except NotFound:
                continue
        return woken

    async def _completed(self, callback: CallbackId, completion: str) -> bool:
        try:
            taken = Taken.decode((await self._store.get(callback.taken(self._layout))).data)
        except NotFound:
            taken = None
        except ValueError:
            taken = None  # (its run's wait says what is wrong with it)
        if taken is None:
            await self._waking.wake(callback.run_id, JobStatus.WAITING_FOR_CALLBACK)
            return True
        info = await self._store.head(completion)
        if info.etag != taken.etag:
            log.warning(
                "callback %s was completed again after its run took a completion "
                "(%d bytes, etag %s): ignored and deleted",
                callback,
                info.size,
                info.etag,
                extra={"run_id": callback.run_id},
            )
        with contextlib.suppress(PreconditionFailed, NotFound):
            await self._store.delete(completion, if_match=info.etag)
        return False


_AWS_HOST = re.compile(r"^sqs[.-]([a-z0-9-]+)\.amazonaws\.com")


def _client_for(queue_url: str) -> SqsClient:
    """An SQS client for the queue at ``queue_url``: its endpoint is the
    URL's, its region the one an AWS queue's host names (else the usual
    AWS configuration's)."""
    parts = urlsplit(queue_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"callback_notices takes an SQS queue URL, not {queue_url!r}")
    region = _AWS_HOST.match(parts.netloc)
    return SqsClient(f"{parts.scheme}://{parts.netloc}", region[1] if region else None)


def _keys_in(body: object) -> list[str]:
    """The object keys an S3 event notification (as SQS delivers it) names."""
    try:
        event = json.loads(body) if isinstance(body, str) else None
    except ValueError:
        return []
    records = event.get("Records") if isinstance(event, dict) else None
    keys = []
    for record in records if isinstance(records, list) else []:
        with contextlib.suppress(AttributeError, TypeError):
            key = record["s3"]["object"]["key"]
            if isinstance(key, str):
                keys.append(unquote_plus(key))
    return keys
