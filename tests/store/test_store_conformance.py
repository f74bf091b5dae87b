"""The ObjectStore contract, run against every backend (memory, file, S3 on moto).

One suite, so the backends cannot drift apart: what the engine relies on from
one it gets from all.
"""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from stepstone.store import (
    AlreadyExists,
    InvalidKey,
    NewObject,
    NotFound,
    ObjectInfo,
    ObjectStore,
    PreconditionFailed,
    StoreError,
)
from stepstone.store.file import RecoverableObject


def is_s3(store: ObjectStore) -> bool:
    return store.location.startswith("s3://")


# -- get / head / put ---------------------------------------------------------


async def test_put_then_get_and_head(any_store: ObjectStore) -> None:
    before = time.time()
    etag = await any_store.put("jobs/one", b"hello")
    got = await any_store.get("jobs/one")
    assert (got.key, got.data, got.etag) == ("jobs/one", b"hello", etag)
    info = await any_store.head("jobs/one")
    assert (info.key, info.etag, info.size) == ("jobs/one", etag, 5)
    # S3's LastModified has one-second resolution.
    assert before - 2 <= info.modified <= time.time() + 2


async def test_put_replaces_and_changes_etag(any_store: ObjectStore) -> None:
    first = await any_store.put("k", b"one")
    second = await any_store.put("k", b"two")
    assert first != second
    assert (await any_store.get("k")).data == b"two"
    assert (await any_store.head("k")).etag == second


async def test_missing_object_is_not_found(any_store: ObjectStore) -> None:
    with pytest.raises(NotFound) as caught:
        await any_store.get("nope/missing")
    assert caught.value.key == "nope/missing"
    assert any_store.location in str(caught.value)
    with pytest.raises(NotFound):
        await any_store.head("nope/missing")


async def test_get_many_answers_each_key_in_order_with_none_for_what_is_missing(
    any_store: ObjectStore,
) -> None:
    one = await any_store.put("many/one", b"1")
    two = await any_store.put("many/two", b"2")
    keys = ["many/two", "many/missing", "many/one", "many/one/under", "other/missing"]
    found = await any_store.get_many(keys)
    assert [None if f is None else (f.key, f.data, f.etag) for f in found] == [
        ("many/two", b"2", two),
        None,
        ("many/one", b"1", one),
        None,
        None,
    ]
    assert await any_store.get_many([]) == []
    with pytest.raises(NotFound):
        await any_store.get("many/one/under")  # below an object, not a directory


async def test_binary_and_empty_objects(any_store: ObjectStore) -> None:
    binary = bytes(range(256)) * 4
    await any_store.put("bin", binary)
    await any_store.put("empty", b"")
    assert (await any_store.get("bin")).data == binary
    assert (await any_store.get("empty")).data == b""
    assert (await any_store.head("empty")).size == 0


async def test_large_object_over_5_mib(any_store: ObjectStore) -> None:
    data = random.Random(7).randbytes(5 * 1024 * 1024 + 12345)
    etag = await any_store.put_if_absent("big", data)
    got = await any_store.get("big")
    assert got.data == data
    assert got.etag == etag
    assert (await any_store.head("big")).size == len(data)
    new = await any_store.put_if_match("big", data[::-1], etag)
    assert (await any_store.get("big")).etag == new


# -- put_if_absent --------------------------------------------------------------


async def test_put_if_absent_creates_then_refuses(any_store: ObjectStore) -> None:
    etag = await any_store.put_if_absent("outcomes/r1", b"first")
    assert (await any_store.get("outcomes/r1")).etag == etag
    with pytest.raises(AlreadyExists) as caught:
        await any_store.put_if_absent("outcomes/r1", b"second")
    assert isinstance(caught.value, PreconditionFailed)
    assert caught.value.key == "outcomes/r1"
    assert (await any_store.get("outcomes/r1")).data == b"first"


async def test_put_if_absent_after_delete_creates_again(any_store: ObjectStore) -> None:
    await any_store.put_if_absent("k", b"1")
    await any_store.delete("k")
    await any_store.put_if_absent("k", b"2")
    assert (await any_store.get("k")).data == b"2"


async def test_put_many_if_absent_creates_each_free_key_in_order(any_store: ObjectStore) -> None:
    await any_store.put("taken", b"before")
    results = await any_store.put_many_if_absent(
        [
            NewObject("many/a", b"a"),
            NewObject("taken", b"again"),
            RecoverableObject("many/b", b"b", recovered=b"only for a recovery"),
            NewObject("many/a", b"a twice"),  # the first of one key wins, the rest find it
            NewObject("../x", b"bad key"),
        ]
    )
    assert isinstance(results[0], str) and isinstance(results[2], str)
    assert isinstance(results[1], AlreadyExists) and isinstance(results[3], AlreadyExists)
    assert isinstance(results[4], InvalidKey)
    assert (await any_store.get("many/a")).etag == results[0]
    assert [(await any_store.get(k)).data for k in ("many/a", "many/b", "taken")] == [
        b"a",
        b"b",
        b"before",
    ]
    assert await any_store.put_many_if_absent([]) == []


async def test_concurrent_put_many_if_absent_has_one_winner_per_key(any_store: ObjectStore) -> None:
    keys = [f"race/{i}" for i in range(4)]

    async def attempt(n: int) -> list[str | StoreError]:
        return await any_store.put_many_if_absent([NewObject(k, b"%d" % n) for k in keys])

    results = await asyncio.gather(*(attempt(n) for n in range(8)))
    for i, key in enumerate(keys):
        winners = [n for n, r in enumerate(results) if isinstance(r[i], str)]
        assert len(winners) == 1
        assert all(isinstance(r[i], AlreadyExists) for r in results if not isinstance(r[i], str))
        assert (await any_store.get(key)).data == b"%d" % winners[0]


# -- put_if_match ----------------------------------------------------------------


async def test_put_if_match_swaps_on_current_etag(any_store: ObjectStore) -> None:
    etag = await any_store.put("lease", b"v1")
    new = await any_store.put_if_match("lease", b"v2", etag)
    assert new != etag
    got = await any_store.get("lease")
    assert (got.data, got.etag) == (b"v2", new)


async def test_put_if_match_refuses_stale_etag(any_store: ObjectStore) -> None:
    stale = await any_store.put("lease", b"v1")
    await any_store.put("lease", b"v2")
    with pytest.raises(PreconditionFailed) as caught:
        await any_store.put_if_match("lease", b"v3", stale)
    assert not isinstance(caught.value, AlreadyExists)
    assert (await any_store.get("lease")).data == b"v2"


async def test_put_if_match_on_missing_object_is_not_found(any_store: ObjectStore) -> None:
    etag = await any_store.put("lease", b"v1")
    await any_store.delete("lease")
    with pytest.raises(NotFound):
        await any_store.put_if_match("lease", b"v2", etag)
    with pytest.raises(NotFound):
        await any_store.head("lease")


# -- delete ------------------------------------------------------------------------


async def test_delete_unconditional(any_store: ObjectStore) -> None:
    await any_store.put("k", b"x")
    await any_store.delete("k")
    with pytest.raises(NotFound):
        await any_store.get("k")
    await any_store.delete("k")  # a missing object is not an error


async def test_delete_if_match(any_store: ObjectStore) -> None:
    etag = await any_store.put("k", b"x")
    await any_store.delete("k", if_match=etag)
    with pytest.raises(NotFound):
        await any_store.get("k")


async def test_delete_if_match_refuses_stale_etag(any_store: ObjectStore) -> None:
    stale = await any_store.put("k", b"x")
    await any_store.put("k", b"y")
    with pytest.raises(PreconditionFailed):
        await any_store.delete("k", if_match=stale)
    assert (await any_store.get("k")).data == b"y"


async def test_delete_if_match_on_missing_object_is_not_found(any_store: ObjectStore) -> None:
    etag = await any_store.put("k", b"x")
    await any_store.delete("k")
    with pytest.raises(NotFound):
        await any_store.delete("k", if_match=etag)


# -- listing -------------------------------------------------------------------------

KEYS = [
    "a/x",
    "a/y/z",
    "a-c",
    "a0",
    "b",
    "B",
    "é",
    "z/😀",
    "z/\uff5e",
    "z/\u00ff",
    "queue/ready/0001",
    "queue/ready/0002",
    "queue/ready/0010",
]
ORDER = sorted(KEYS, key=str.encode)


@pytest.fixture
async def listed(any_store: ObjectStore) -> ObjectStore:
    for key in random.Random(3).sample(KEYS, len(KEYS)):
        await any_store.put(key, key.encode())
    return any_store


async def test_list_is_in_utf8_byte_order(listed: ObjectStore) -> None:
    page = await listed.list()
    assert [i.key for i in page] == ORDER
    # '-' sorts before '/', which sorts before '0': nesting must not reorder keys.
    assert ORDER.index("a-c") < ORDER.index("a/x") < ORDER.index("a0")


async def test_list_reports_etag_size_and_time(listed: ObjectStore) -> None:
    for info in await listed.list():
        assert isinstance(info, ObjectInfo)
        head = await listed.head(info.key)
        assert (info.etag, info.size) == (head.etag, len(info.key.encode()))
        assert abs(info.modified - head.modified) < 1.0


@pytest.mark.parametrize(
    "prefix",
    ["", "a", "a/", "a/y", "queue/ready/", "queue/ready/000", "z/", "nothing/"],
)
async def test_list_by_prefix(listed: ObjectStore, prefix: str) -> None:
    page = await listed.list(prefix)
    assert [i.key for i in page] == [k for k in ORDER if k.startswith(prefix)]


async def test_list_start_after(listed: ObjectStore) -> None:
    # Existing keys, keys that are not there, and ones that fall inside a "directory".
    for after in [*ORDER, "", "a", "a/", "a/y", "a/zz", "a.", "queue/ready/0005", "zzz"]:
        page = await listed.list(start_after=after)
        assert [i.key for i in page] == [k for k in ORDER if k.encode() > after.encode()], after
    page = await listed.list("queue/", start_after="queue/ready/0001")
    assert [i.key for i in page] == ["queue/ready/0002", "queue/ready/0010"]


async def test_list_limit_and_paging(listed: ObjectStore) -> None:
    assert [i.key for i in await listed.list(limit=3)] == ORDER[:3]
    assert await listed.list(limit=0) == []
    scanned = [i.key async for i in listed.scan(page_size=2)]
    assert scanned == ORDER
    scanned = [i.key async for i in listed.scan("queue/", page_size=1)]
    assert scanned == ["queue/ready/0001", "queue/ready/0002", "queue/ready/0010"]
    for after in ["", "a", "a/y", "queue/ready/0001", "zzz"]:
        scanned = [i.key async for i in listed.scan(start_after=after, page_size=2)]
        assert scanned == [k for k in ORDER if k.encode() > after.encode()], after


async def test_a_scan_stopped_early_leaves_the_store_usable(listed: ObjectStore) -> None:
    async for _ in listed.scan(page_size=1):
        break
    assert [i.key async for i in listed.scan(page_size=3)] == ORDER


async def test_list_of_empty_store(any_store: ObjectStore) -> None:
    assert await any_store.list() == []
    assert await any_store.list("a/") == []


async def test_deleted_objects_leave_the_listing(listed: ObjectStore) -> None:
    await listed.delete("a/y/z")
    await listed.delete("é")
    assert [i.key for i in await listed.list()] == [k for k in ORDER if k not in ("a/y/z", "é")]


# -- keys ------------------------------------------------------------------------------

BAD_KEYS = [
    "",
    "..",
    ".",
    "../x",
    "a/../../x",
    "a/./b",
    "a//b",
    "a/",
    "/etc/passwd",
    "a\\..\\b",
    "nul\x00byte",
    "line\nbreak",
    "tab\tkey",
    "del\x7f",
    "x" * 1025,
    "é" * 513,  # 1026 bytes
    "a/" + "s" * 256 + "/b",  # a segment past a filesystem's NAME_MAX, on every backend
    "é" * 128,  # 256 bytes in one segment
    "\udc80lone-surrogate",
    ".stepstone-tmp/locks/000.lock",
]


@pytest.mark.parametrize("key", BAD_KEYS, ids=[repr(k)[:24] for k in BAD_KEYS])
async def test_invalid_keys_are_refused_by_every_operation(
    any_store: ObjectStore, key: str
) -> None:
    etag = await any_store.put("ok", b"x")
    calls = [
        any_store.get(key),
        any_store.head(key),
        any_store.put(key, b"x"),
        any_store.put_if_absent(key, b"x"),
        any_store.put_if_match(key, b"x", etag),
        any_store.delete(key),
        any_store.delete(key, if_match=etag),
    ]
    for call in calls:
        with pytest.raises(InvalidKey):
            await call
    assert [i.key for i in await any_store.list()] == ["ok"]


async def test_longest_valid_key_works(any_store: ObjectStore) -> None:
    # key_limit bytes (1024, less an S3Store's prefix and its slash) in
    # segments of up to 255 bytes; one byte more is refused before any request.
    limit = any_store.key_limit
    assert limit == (1024 - len("t/") if is_s3(any_store) else 1024)
    key = "/".join(["k" * 254] * 4) + "/" + "v" * (limit - 4 * 255)
    assert len(key.encode()) == limit
    await any_store.put(key, b"x")
    assert [i.key for i in await any_store.list()] == [key]
    with pytest.raises(InvalidKey, match=f"longer than {limit} bytes"):
        await any_store.put(key + "v", b"x")


async def test_errors_are_store_errors(any_store: ObjectStore) -> None:
    with pytest.raises(StoreError):
        await any_store.get("missing")
    with pytest.raises(ValueError):  # InvalidKey is a ValueError too
        await any_store.get("../x")


# -- concurrency --------------------------------------------------------------------------


async def test_concurrent_put_if_absent_has_exactly_one_winner(any_store: ObjectStore) -> None:
    async def attempt(n: int) -> int | None:
        try:
            await any_store.put_if_absent("outcomes/race", f"writer-{n}".encode())
        except AlreadyExists:
            return None
        return n

    results = await asyncio.gather(*(attempt(n) for n in range(32)))
    winners = [n for n in results if n is not None]
    assert len(winners) == 1
    assert (await any_store.get("outcomes/race")).data == f"writer-{winners[0]}".encode()


async def cas_increment(store: ObjectStore, key: str, times: int, rng: random.Random) -> int:
    """Increment a counter ``times`` times by compare-and-swap; return the conflicts seen."""
    conflicts = 0
    done = 0
    while done < times:
        current = await store.get(key)
        value = int(current.data.split(b":")[0])
        await asyncio.sleep(0)  # let the others read the same version: a real race
        try:
            # The body carries the value: S3's MD5 etags repeat for equal bytes.
            await store.put_if_match(key, b"%d:counter" % (value + 1), current.etag)
        except PreconditionFailed:
            conflicts += 1
            await asyncio.sleep(rng.random() * 0.005)
            continue
        done += 1
    return conflicts


async def test_concurrent_cas_increments_lose_no_update(any_store: ObjectStore) -> None:
    workers = 16
    times = 1 if is_s3(any_store) else 8  # moto answers ~100 requests/s
    await any_store.put("counter", b"0:counter")
    conflicts = await asyncio.gather(
        *(cas_increment(any_store, "counter", times, random.Random(n)) for n in range(workers))
    )
    final = await any_store.get("counter")
    assert final.data == b"%d:counter" % (workers * times)
    assert sum(conflicts) > 0  # they really did race


async def test_concurrent_writers_to_different_keys(any_store: ObjectStore) -> None:
    keys = [f"many/{n:03d}" for n in range(24)]
    await asyncio.gather(*(any_store.put_if_absent(k, k.encode()) for k in keys))
    assert [i.key for i in await any_store.list("many/")] == keys
