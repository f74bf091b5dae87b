"""Fenced deletes where DeleteObject ignores If-Match: a fenced swap to a
husk, then a DELETE by its writer (stepstone.store.s3.husks). On moto told
``conditional_delete=false`` and on a real server (CI: Ceph RGW 16, which
ignores If-Match on DeleteObject: the store finds out by itself)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from stepstone.store import AlreadyExists, NotFound, PreconditionFailed, open_store
from stepstone.store.s3 import S3Store, husks
from stepstone.store.s3.husks import HUSK_META, husk_body


@pytest.fixture(params=["moto", "real"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[S3Store]:
    if request.param == "moto":
        url = request.getfixturevalue("s3_url") + "&conditional_delete=false"
    else:
        url = request.getfixturevalue("real_s3_url")
    opened = open_store(url)
    assert isinstance(opened, S3Store)
    yield opened
    await opened.close()


async def leave_a_husk(store: S3Store, key: str) -> str:
    """What a writer that died between its swap and its DELETE leaves: a husk."""

    async def put(client: object) -> str:
        answer = await client.put_object(  # type: ignore[attr-defined]
            Bucket=store.bucket,
            Key=store.bucket_key(key),
            Body=husk_body(husks.token()),
            Metadata={HUSK_META: "1"},
        )
        return str(answer["ETag"])

    return await store.send(key, put)


async def test_a_fenced_delete_holds_its_fence_and_leaves_nothing(store: S3Store) -> None:
    stale = await store.put("k", b"1")
    current = await store.put("k", b"2")
    with pytest.raises(PreconditionFailed):
        await store.delete("k", if_match=stale)
    assert (await store.get("k")).data == b"2"
    await store.delete("k", if_match=current)
    with pytest.raises(NotFound):
        await store.head("k")
    assert [info.key async for info in store.scan()] == []


async def test_a_husk_is_no_object_to_a_reader(store: S3Store) -> None:
    await leave_a_husk(store, "k")
    with pytest.raises(NotFound):
        await store.get("k")
    with pytest.raises(NotFound):
        await store.head("k")
    assert await store.get_many(["k"]) == [None]


async def test_a_create_waits_for_a_husks_writer_to_remove_it(store: S3Store) -> None:
    await leave_a_husk(store, "k")

    async def its_writer_deletes_it() -> None:
        await asyncio.sleep(0.3)  # (the writer's pace: the create meets the husk first)
        await store.delete("k")

    remover = asyncio.create_task(its_writer_deletes_it())
    await store.put_if_absent("k", b"mine")
    await remover
    # Had the create replaced the husk before its writer's delete, that
    # delete would have removed the new object.
    assert (await store.get("k")).data == b"mine"
    with pytest.raises(AlreadyExists):
        await store.put_if_absent("k", b"a live object is no husk")


async def test_a_stale_husk_is_replaced_by_one_create_of_many(
    store: S3Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A husk whose writer died is replaced once it has stood STALE; of
    creators racing for it, one wins, the others find its object."""
    monkeypatch.setattr("stepstone.store.s3.store.STALE", 0.5)
    await leave_a_husk(store, "k")

    async def create(n: int) -> int | None:
        try:
            await store.put_if_absent("k", b"creator %d" % n)
        except AlreadyExists:
            return None
        return n

    winners = [n for n in await asyncio.gather(*(create(n) for n in range(8))) if n is not None]
    assert len(winners) == 1
    assert (await store.get("k")).data == b"creator %d" % winners[0]


async def test_a_writer_past_its_guard_leaves_its_husk_to_a_create(
    store: S3Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer paused between its swap and its DELETE (a zombie) does not
    send the DELETE past GUARD: it could meet a newer object by then."""
    etag = await store.put("k", b"1")
    if await store._deletes_hold():
        pytest.skip("this server holds If-Match on DeleteObject: no husks")
    monkeypatch.setattr("stepstone.store.s3.store.GUARD", 0.0)
    await store.delete("k", if_match=etag)
    with pytest.raises(NotFound):
        await store.head("k")
    assert [info.key async for info in store.scan()] == ["k"]  # the husk, left
    monkeypatch.setattr("stepstone.store.s3.store.STALE", 0.2)
    await store.put_if_absent("k", b"2")
    assert (await store.get("k")).data == b"2"
