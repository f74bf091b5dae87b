"""An S3 answer that lacks what S3 always sends (a gateway that drops ETag or
Content-Length, or sends a size that is none) is a store stepstone cannot read:
one StoreError naming the field and the key, at once, never a bare KeyError
and never a retry of the same answer. Through a real proxy in front of moto."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from s3_proxy import HOP, Forwarding

from stepstone.store import StoreError, open_store
from stepstone.store.errors import StoreUnavailable


class ThinningProxy:
    """Forwards every request; on the answers to ``method`` it drops ``header``,
    or sets it to ``value`` when one is given."""

    def __init__(self, upstream: str) -> None:
        self._server = Forwarding(upstream)
        self.method, self.header, self.value = "", "", ""
        self.thinned = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        answer = await self._server.forward(request, headers, body)
        if request.method == self.method and "x-id=" not in request.path_qs:
            self.thinned += 1
            answer.headers.popall(self.header, None)
            if self.value:
                answer.headers[self.header] = self.value
        return answer

    async def start(self) -> str:
        return await self._server.start(self.handle)

    async def stop(self) -> None:
        await self._server.stop()


@pytest.fixture
async def thinning(moto_server: str, s3_bucket: str) -> AsyncIterator[tuple[ThinningProxy, str]]:
    proxy = ThinningProxy(moto_server)
    url = await proxy.start()
    yield proxy, f"s3://{s3_bucket}/t?endpoint_url={url}&region=us-east-1&retry_attempts=3"
    await proxy.stop()


@pytest.mark.parametrize(
    ("method", "header", "value", "field"),
    [
        ("HEAD", "ETag", "", "ETag"),
        ("HEAD", "Last-Modified", "", "LastModified"),
        ("PUT", "ETag", "", "ETag"),
    ],
)
async def test_an_answer_without_a_field_s3_always_sends_names_it_and_the_key(
    thinning: tuple[ThinningProxy, str], method: str, header: str, value: str, field: str
) -> None:
    proxy, url = thinning
    store = open_store(url)
    try:
        await store.put("jobs/a", b"payload")
        proxy.method, proxy.header, proxy.value = method, header, value
        before = proxy.thinned
        with pytest.raises(StoreError) as caught:
            if method == "HEAD":
                await store.head("jobs/a")
            else:
                await store.put("jobs/a", b"again")
        assert not isinstance(caught.value, (StoreUnavailable, KeyError))
        assert field in str(caught.value) and "jobs/a" in str(caught.value)
        assert proxy.thinned - before == 1, "the same answer was asked for again"
        proxy.method = ""
        assert (await store.get("jobs/a")).data in (b"payload", b"again")  # nothing lost
    finally:
        await store.close()


async def test_a_listing_entry_without_a_size_names_the_field(
    thinning: tuple[ThinningProxy, str],
) -> None:
    """A listing's entries come in its XML body: an entry whose Size is not a
    number is named, as a header would be."""
    proxy, url = thinning
    store = open_store(url)
    try:
        await store.put("jobs/a", b"payload")
        original = proxy._server.forward

        async def garbled(
            request: web.Request, headers: dict[str, str], body: bytes
        ) -> web.Response:
            answer = await original(request, headers, body)
            if request.method == "GET" and "list-type=2" in request.path_qs:
                assert answer.body is not None and isinstance(answer.body, bytes)
                answer.body = answer.body.replace(b"<Size>7</Size>", b"<Size>-7</Size>")
            return answer

        proxy._server.forward = garbled  # type: ignore[method-assign]
        with pytest.raises(StoreError, match="Size"):
            await store.list("jobs/")
    finally:
        await store.close()
