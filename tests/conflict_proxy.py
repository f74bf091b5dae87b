"""An HTTP proxy in front of S3 (moto) that answers conditional PUTs with 409
ConditionalRequestConflict, as AWS does when conditional writes to one key
race: scattered (each conditional PUT with a chance) or in bursts on one key
(a conditional PUT starts a burst with a chance; it and the next ones on that
key, up to ``burst`` of them within ``window`` seconds, all answer 409; then
the key is calm for ``window`` seconds, as a key is once its racing writers
have landed: bursts back to back with no rival ever landing would be one
longer burst, past the budget a store documents).
Draws come from ``random.Random(seed)``. Everything else is forwarded
unchanged. ``on_conflict(path)`` runs before each 409 is answered (a test
lands the rival write there)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web
from s3_proxy import HOP, Forwarding

_CONFLICT = (
    '<?xml version="1.0" encoding="UTF-8"?><Error><Code>ConditionalRequestConflict</Code>'
    "<Message>A conflicting conditional operation is currently in progress against this "
    "resource.</Message></Error>"
)


@dataclass
class ConflictProxy:
    upstream: str
    seed: int = 0
    scatter: float = 0.0
    burst_chance: float = 0.0
    burst: int = 6
    window: float = 2.0
    on_conflict: Callable[[str], None] | None = None
    conflicts: int = 0
    conditional: int = 0
    requests: list[tuple[str, str]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    url: str = ""

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self._server = Forwarding(self.upstream)
        self._bursts: dict[str, tuple[int, float]] = {}  # path: (409s left, until)
        self._calm: dict[str, float] = {}  # path: no burst starts there before this

    def _conflicts(self, path: str) -> bool:
        now = time.monotonic()
        left, until = self._bursts.pop(path, (0, 0.0))
        if left > 0 and now < until:
            self._bursts[path] = (left - 1, until)
            return True
        if until:  # a burst just ended here
            self._calm[path] = now + self.window
        if now < self._calm.get(path, 0.0):
            return False
        if self.burst_chance and self.rng.random() < self.burst_chance:
            self._bursts[path] = (self.burst - 1, now + self.window)
            return True
        return bool(self.scatter) and self.rng.random() < self.scatter

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append((request.method, request.path))
        self.headers.append(dict(request.headers))
        conditional = request.method == "PUT" and (
            "If-Match" in request.headers or "If-None-Match" in request.headers
        )
        if conditional:
            self.conditional += 1
            if self._conflicts(request.path):
                self.conflicts += 1
                if self.on_conflict is not None:
                    self.on_conflict(request.path)
                return web.Response(
                    status=409, body=_CONFLICT.encode(), content_type="application/xml"
                )
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        return await self._server.forward(request, headers, body)

    def count(self, method: str) -> int:
        return sum(1 for m, _ in self.requests if m == method)

    async def start(self) -> None:
        self.url = await self._server.start(self.handle)

    async def stop(self) -> None:
        await self._server.stop()
