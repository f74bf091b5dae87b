"""FileStore listing against the MemoryStore model, on generated key sets.

The FileStore derives key order from a directory walk (entries sorted with
``/`` appended to directory names); the MemoryStore sorts keys directly. Any
key set, prefix, start_after and limit must give both the same page.
"""

from __future__ import annotations

import asyncio
import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stepstone.store import FileStore, InvalidKey, MemoryStore, validate_key

# A small alphabet around "/" (0x2f): "-" and "." sort before it, "0" and up after.
SEGMENT = st.text(alphabet="a-.0é😀", min_size=1, max_size=2)
KEY = st.lists(SEGMENT, min_size=1, max_size=3).map("/".join)


def _valid(key: str) -> bool:
    try:
        validate_key(key)
    except InvalidKey:
        return False
    return True


def _no_file_dir_clash(keys: list[str]) -> bool:
    # A filesystem cannot hold both "a" and "a/b"; S3 can, the FileStore refuses it.
    return not any(other.startswith(k + "/") for k in keys for other in keys)


KEYS = st.lists(KEY.filter(_valid), min_size=0, max_size=12, unique=True).filter(_no_file_dir_clash)
# Order, not durability, is the subject: use RAM when there is some, fsync is free there.
SCRATCH = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
PROBE = st.one_of(st.just(""), KEY, KEY.map(lambda k: k + "/"))


def _probes(keys: list[str]) -> st.SearchStrategy[str]:
    """Prefixes and cursors near the keys: whole keys, their leading parts, and random ones."""
    near = sorted({k[:n] for k in keys for n in range(1, len(k) + 1)})
    return st.one_of(PROBE, st.sampled_from(near)) if near else PROBE


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keys=KEYS, limit=st.integers(min_value=0, max_value=15), data=st.data())
def test_file_listing_matches_the_model(keys: list[str], limit: int, data: st.DataObject) -> None:
    prefix = data.draw(_probes(keys).filter(lambda p: p == "" or _valid(p.rstrip("/"))))
    start_after = data.draw(st.one_of(st.none(), _probes(keys)))

    async def pages() -> tuple[list[str], list[str]]:
        model = MemoryStore()
        with tempfile.TemporaryDirectory(dir=SCRATCH) as root:
            store = FileStore(root)
            for key in keys:
                await model.put(key, b"")
                await store.put(key, b"")
            got = await store.list(prefix, start_after=start_after, limit=limit)
            want = await model.list(prefix, start_after=start_after, limit=limit)
            await store.close()
        return [i.key for i in got], [i.key for i in want]

    got, want = asyncio.run(pages())
    assert got == want
