"""An HTTP proxy in front of S3 (moto) that drops the conditions of every write:
a gateway that forwards ``PutObject`` and ``DeleteObject`` without their
``If-Match`` and ``If-None-Match`` headers, as a store without conditional
writes behaves. Everything else passes through unchanged."""

from __future__ import annotations

import aiohttp
from aiohttp import web

_HOP = {"host", "content-length", "transfer-encoding", "connection", "expect"}
_CONDITIONS = {"if-match", "if-none-match"}
_DROP_RESPONSE = {"content-length", "transfer-encoding", "connection", "content-encoding", "date"}


class UnconditionalProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.url = ""
        self.dropped = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {}
        for name, value in request.headers.items():
            if name.lower() in _CONDITIONS and request.method in ("PUT", "DELETE"):
                self.dropped += 1
            elif name.lower() not in _HOP:
                headers[name] = value
        async with self.session.request(
            request.method, self.upstream + request.path_qs, headers=headers, data=body
        ) as answer:
            payload = await answer.read()
            drop = _DROP_RESPONSE - ({"content-length"} if request.method == "HEAD" else set())
            out = {k: v for k, v in answer.headers.items() if k.lower() not in drop}
            return web.Response(status=answer.status, body=payload or None, headers=out)

    async def start(self) -> None:
        self.session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, handle_signals=False)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    async def stop(self) -> None:
        await self.runner.cleanup()
        await self.session.close()
