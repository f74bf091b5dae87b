"""An HTTP proxy in front of S3 (moto) that drops the conditions of every write:
a gateway that forwards ``PutObject`` and ``DeleteObject`` without their
``If-Match`` and ``If-None-Match`` headers, as a store without conditional
writes behaves. Everything else passes through unchanged."""

from __future__ import annotations

from aiohttp import web
from s3_proxy import HOP, Forwarding

_CONDITIONS = {"if-match", "if-none-match"}


class UnconditionalProxy:
    def __init__(self, upstream: str) -> None:
        self._server = Forwarding(upstream)
        self.url = ""
        self.dropped = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {}
        for name, value in request.headers.items():
            if name.lower() in _CONDITIONS and request.method in ("PUT", "DELETE"):
                self.dropped += 1
            elif name.lower() not in HOP:
                headers[name] = value
        return await self._server.forward(request, headers, body)

    async def start(self) -> None:
        self.url = await self._server.start(self.handle)

    async def stop(self) -> None:
        await self._server.stop()
