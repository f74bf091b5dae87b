"""MemoryStore listing against a plain sort of its keys, after puts and deletes.

The MemoryStore keeps its keys in order in chunks (``stepstone.store.sorted_keys``)
instead of sorting them for every page; here chunks are made tiny, so that a few
generated keys split, empty and drop chunks as a big store would.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepstone.store import InvalidKey, MemoryStore, sorted_keys, validate_key

SEGMENT = st.text(alphabet="a-.0é😀", min_size=1, max_size=2)
KEY = st.lists(SEGMENT, min_size=1, max_size=3).map("/".join)


def _valid(key: str) -> bool:
    try:
        validate_key(key)
    except InvalidKey:
        return False
    return True


KEYS = st.lists(KEY.filter(_valid), max_size=40)
PROBE = st.one_of(st.just(""), KEY, KEY.map(lambda k: k + "/"))


@pytest.fixture(autouse=True)
def tiny_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sorted_keys, "CHUNK", 2)


@settings(max_examples=300, deadline=None)
@given(
    puts=KEYS,
    deletes=KEYS,
    prefix=PROBE.filter(lambda p: p == "" or _valid(p.rstrip("/"))),
    start_after=st.one_of(st.none(), PROBE),
    limit=st.integers(min_value=0, max_value=50),
)
def test_memory_listing_is_the_sorted_filtered_keys(
    puts: list[str], deletes: list[str], prefix: str, start_after: str | None, limit: int
) -> None:
    async def page() -> list[str]:
        store = MemoryStore()
        for key in puts:
            await store.put(key, b"")
        for key in deletes:
            await store.delete(key)
        return [i.key for i in await store.list(prefix, start_after=start_after, limit=limit)]

    held = set(puts) - set(deletes)
    after = start_after.encode() if start_after is not None else b""
    want = sorted((k for k in held if k.startswith(prefix) and k.encode() > after), key=str.encode)[
        :limit
    ]
    assert asyncio.run(page()) == want
