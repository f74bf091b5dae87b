"""Single sends and deletes, gathered into SQS's batch calls.

SQS bills by request, and a batch of 10 costs one: a worker's acks and a
burst of enqueues each go out one by one from many tasks, so this collects
them for a short window (or until 10 are waiting) and makes one
SendMessageBatch or DeleteMessageBatch call. Each caller still gets its own
entry's result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from .client import SqsClient
from .limits import SQS_MAX_BATCH


@dataclass(frozen=True, slots=True)
class Refusal:
    """SQS's answer for one entry of a batch it did not carry out."""

    code: str
    message: str


@dataclass(slots=True)
class _Pending:
    entry: dict[str, Any]
    future: asyncio.Future[Refusal | None]


@dataclass(slots=True)
class RequestBatcher:
    """Collects single entries for ``window`` seconds (or 10 of them) and sends
    them as one ``operation`` call per queue URL."""

    sqs: SqsClient
    operation: str
    """``send_message_batch`` or ``delete_message_batch``."""
    window: float
    max_bytes: int = 262_144
    """Message text per batch call; a batch that would exceed it is split."""
    pending: dict[str, list[_Pending]] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    timers: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    async def submit(self, url: str, entry: dict[str, Any]) -> Refusal | None:
        """Send ``entry`` (without its ``Id``) in the next batch to ``url``:
        None once SQS carried it out, or why it did not. Raises what the
        batch call raised."""
        future: asyncio.Future[Refusal | None] = asyncio.get_running_loop().create_future()
        bucket = self.pending.setdefault(url, [])
        bucket.append(_Pending(entry, future))
        if len(bucket) >= SQS_MAX_BATCH:
            self._spawn(self._flush(url))
        elif url not in self.timers:
            self.timers[url] = self._spawn(self._flush_later(url))
        return await future

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _flush_later(self, url: str) -> None:
        try:
            await asyncio.sleep(self.window)
        finally:
            self.timers.pop(url, None)
        await self._flush(url)

    async def _flush(self, url: str) -> None:
        while self.pending.get(url):
            bucket = self.pending[url]
            batch: list[_Pending] = []
            size = 0
            while bucket and len(batch) < SQS_MAX_BATCH:
                item_size = len(str(bucket[0].entry.get("MessageBody", "")))
                if batch and size + item_size > self.max_bytes:
                    break
                batch.append(bucket.pop(0))
                size += item_size
            entries = [dict(p.entry, Id=str(i)) for i, p in enumerate(batch)]
            try:
                response = await self.sqs.call(self.operation, QueueUrl=url, Entries=entries)
            except BaseException as exc:
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                continue
            for ok in response.get("Successful", []):
                p = batch[int(ok["Id"])]
                if not p.future.done():
                    p.future.set_result(None)
            for failed in response.get("Failed", []):
                p = batch[int(failed["Id"])]
                if not p.future.done():
                    refusal = Refusal(str(failed.get("Code")), str(failed.get("Message")))
                    p.future.set_result(refusal)

    async def drain(self) -> None:
        """Send everything pending now and wait for every batch call in flight."""
        for url in list(self.pending):
            await self._flush(url)
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)
