"""What the test proxies in front of moto's S3 share: a request forwarded
upstream as it came (less its hop-by-hop headers), and a server on a free
local port that answers every path with one handler."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web

HOP = {"host", "content-length", "transfer-encoding", "connection", "expect"}
_DROP_RESPONSE = {"content-length", "transfer-encoding", "connection", "content-encoding", "date"}


class Forwarding:
    """A server on 127.0.0.1 (``url`` once started) whose ``handler`` may
    answer a request itself or :meth:`forward` it to ``upstream``."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.url = ""

    async def forward(
        self, request: web.Request, headers: dict[str, str], body: bytes
    ) -> web.Response:
        async with self._session.request(
            request.method, self.upstream + request.path_qs, headers=headers, data=body
        ) as answer:
            payload = await answer.read()
            drop = _DROP_RESPONSE - ({"content-length"} if request.method == "HEAD" else set())
            out = {k: v for k, v in answer.headers.items() if k.lower() not in drop}
            return web.Response(status=answer.status, body=payload or None, headers=out)

    async def start(self, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> str:
        self._session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", handler)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self.url

    async def stop(self) -> None:
        await self._runner.cleanup()
        await self._session.close()
