"""FaultyStore: a store that fails on purpose, for reliability tests.

The engine's promises (no lost job, one outcome per run) must hold when the
store misbehaves the way S3 does: a request fails outright, a request is
applied but its answer never arrives, a request is slow, or the store goes
away for a while. This wrapper produces each of these over any real store:

- ``error_rate``: each chosen call fails with a transient StoreUnavailable
  with this probability; a fraction ``after`` of those failures happens
  *after* the inner call completed (the write landed; the caller sees an
  error, like a lost response), the rest before it (nothing happened).
- ``latency``: added delay per call, a number of seconds or a ``(low, high)``
  range drawn uniformly.
- ``down()`` / ``up()``: every call fails before reaching the inner store
  until ``up()``.
- ``fail_next(n, after=...)``: the next ``n`` chosen calls fail, exactly.
- ``hold(prefix)``: chosen calls on keys under ``prefix`` wait until the
  function it returns is called (a request the store is slow to answer, as
  S3 is through a burst of conflicts on one key).

Draws come from ``random.Random(seed)``, so a seeded run injects the same
faults into the same sequence of calls.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from ..base import DEFAULT_PAGE_SIZE, ObjectInfo, ObjectStore, StoredObject
from ..errors import StoreUnavailable

T = TypeVar("T")

OPERATIONS = frozenset({"get", "head", "put", "put_if_absent", "put_if_match", "delete", "list"})
WRITES = frozenset({"put", "put_if_absent", "put_if_match", "delete"})


class FaultyStore(ObjectStore):
    """Wraps ``inner`` and injects failures and latency; see the module docstring.

    ``injected`` counts the failures injected, by ``(operation, "before" | "after" | "down")``.
    """

    def __init__(
        self,
        inner: ObjectStore,
        *,
        error_rate: float = 0.0,
        latency: float | tuple[float, float] = 0.0,
        operations: Iterable[str] | None = None,
        after: float = 0.5,
        seed: int | None = None,
    ) -> None:
        chosen = frozenset(operations) if operations is not None else OPERATIONS
        unknown = chosen - OPERATIONS
        if unknown:
            raise ValueError(f"unknown operations {sorted(unknown)}; known: {sorted(OPERATIONS)}")
        if not 0.0 <= error_rate <= 1.0 or not 0.0 <= after <= 1.0:
            raise ValueError("error_rate and after must be between 0 and 1")
        self.inner = inner
        self.location = inner.location
        self.key_limit = inner.key_limit
        self.remote = inner.remote
        self.error_rate = error_rate
        self.latency = latency
        self.operations = chosen
        self.after = after
        self.rng = random.Random(seed)
        self.injected: Counter[tuple[str, str]] = Counter()
        self._down = False
        self._forced: deque[bool] = deque()
        self._held: dict[str, asyncio.Event] = {}
        self.held = 0
        """Calls waiting in a :meth:`hold` now."""

    # -- control -------------------------------------------------------------

    def down(self) -> None:
        """Make every call fail (before reaching the inner store) until :meth:`up`."""
        self._down = True

    def up(self) -> None:
        """End an outage: calls reach the store again."""
        self._down = False

    @property
    def is_down(self) -> bool:
        """Whether an outage is on (every call fails)."""
        return self._down

    def fail_next(self, n: int = 1, *, after: bool = False) -> None:
        """The next ``n`` calls to chosen operations fail; ``after=True`` lets
        each one reach the inner store first (the answer is lost)."""
        self._forced.extend([after] * n)

    def hold(self, prefix: str) -> Callable[[], None]:
        """Hold every chosen call made from now on to a key under ``prefix``
        until the returned function is called."""
        released = self._held.setdefault(prefix, asyncio.Event())

        def release() -> None:
            released.set()
            if self._held.get(prefix) is released:
                del self._held[prefix]

        return release

    # -- the machinery -----------------------------------------------------------

    def _fault(self, operation: str, when: str, key: str | None) -> StoreUnavailable:
        self.injected[(operation, when)] += 1
        return StoreUnavailable(
            f"injected fault in {operation} ({when})", location=self.location, key=key
        )

    async def _call(self, operation: str, key: str | None, call: Callable[[], Awaitable[T]]) -> T:
        if self._down:
            raise self._fault(operation, "down", key)
        if operation not in self.operations:
            return await call()
        for prefix, released in list(self._held.items()):
            if key is not None and key.startswith(prefix):
                self.held += 1
                try:
                    await released.wait()
                finally:
                    self.held -= 1
        delay = self.rng.uniform(*self.latency) if isinstance(self.latency, tuple) else self.latency
        if delay > 0:
            await asyncio.sleep(delay)
        fail_after: bool | None = None
        if self._forced:
            fail_after = self._forced.popleft()
        elif self.error_rate and self.rng.random() < self.error_rate:
            fail_after = self.rng.random() < self.after
        if fail_after is False:
            raise self._fault(operation, "before", key)
        result = await call()
        if fail_after:
            raise self._fault(operation, "after", key)
        return result

    # -- the contract ------------------------------------------------------------

    async def get(self, key: str) -> StoredObject:
        return await self._call("get", key, lambda: self.inner.get(key))

    async def head(self, key: str) -> ObjectInfo:
        return await self._call("head", key, lambda: self.inner.head(key))

    async def put(self, key: str, data: bytes) -> str:
        return await self._call("put", key, lambda: self.inner.put(key, data))

    async def put_if_absent(self, key: str, data: bytes) -> str:
        return await self._call("put_if_absent", key, lambda: self.inner.put_if_absent(key, data))

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return await self._call(
            "put_if_match", key, lambda: self.inner.put_if_match(key, data, etag)
        )

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        await self._call("delete", key, lambda: self.inner.delete(key, if_match=if_match))

    async def list(
        self,
        prefix: str = "",
        *,
        start_after: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
    ) -> list[ObjectInfo]:
        return await self._call(
            "list", None, lambda: self.inner.list(prefix, start_after=start_after, limit=limit)
        )

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()
