"""The one SQS client a queue talks through, and what its errors mean.

aiobotocore is imported when the first request is made, so importing
``stepstone.runtime`` stays cheap for users who never touch SQS. Every
request is counted by operation: the figures docs/scaling.md prices.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Any

_LOST_CODES = ("ReceiptHandleIsInvalid", "MessageNotInflight", "InvalidParameterValue")


class SqsClient:
    """An aiobotocore SQS client opened on first use, with queue URLs cached."""

    def __init__(self, endpoint_url: str | None, region: str | None) -> None:
        self.endpoint_url = endpoint_url
        self.region = region
        self.requests: Counter[str] = Counter()
        """SQS requests made, by operation."""
        self._client: Any = None
        self._lock: asyncio.Lock | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._urls: dict[str, str] = {}

    @property
    def opened(self) -> bool:
        """Whether a request was made since the last :meth:`close`."""
        return self._client is not None

    async def _open(self) -> Any:
        if self._client is not None:
            return self._client
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is None:
                from aiobotocore.session import get_session

                stack = contextlib.AsyncExitStack()
                creator = get_session().create_client(
                    "sqs", endpoint_url=self.endpoint_url, region_name=self.region
                )
                self._client = await stack.enter_async_context(creator)
                self._stack = stack
        return self._client

    async def call(self, operation: str, **params: Any) -> dict[str, Any]:
        """Make one request (``operation`` is the client method's name)."""
        client = await self._open()
        self.requests[operation] += 1
        result: dict[str, Any] = await getattr(client, operation)(**params)
        return result

    async def url(self, queue_name: str) -> str:
        url = self._urls.get(queue_name)
        if url is None:
            found = await self.call("get_queue_url", QueueName=queue_name)
            url = self._urls[queue_name] = str(found["QueueUrl"])
        return url

    def know_url(self, queue_name: str, url: str) -> None:
        """Cache a URL learned otherwise (CreateQueue answers with it)."""
        self._urls[queue_name] = url

    async def close(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()


def error_code(exc: BaseException) -> str:
    """The SQS error code botocore put on ``exc``, or "" for any other error."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def is_lost(code: str) -> bool:
    """Whether SQS refused because the receipt handle no longer holds the
    message (it was deleted, or received again by someone else)."""
    return any(c in code for c in _LOST_CODES)
