"""Large bodies: written from their parts, read with the large piece apart,
and on S3 in parts where a body is large, with the conditions holding.

Bodies here are a few MiB (S3's smallest part is 5 MiB): what holds for a
few holds for a hundred; memory and time are measured in
benchmarks/big_values.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from stepstone.store import (
    AlreadyExists,
    NotFound,
    ObjectStore,
    PreconditionFailed,
    StoreConfigError,
    StoreError,
)
from stepstone.store.parts import FEED, Parts, Split, Stream
from stepstone.store.s3 import S3Store
from stepstone.store.s3.large import SINGLE_PUT_LIMIT, BodyReader, Multipart

MiB = 1 << 20
SMALL_PARTS = Multipart(threshold=5 * MiB, part_size=5 * MiB)


def body(size: int, seed: int = 0) -> Parts:
    """A body of three buffers: a header, ``size`` bytes that are not all
    alike (so a misplaced part shows), a trailer."""
    middle = bytes((i * 7 + seed) % 251 for i in range(256)) * (size // 256)
    return Parts([b"head:", middle, memoryview(b":tail")])


async def test_a_body_of_parts_is_stored_as_its_bytes_joined(any_store: ObjectStore) -> None:
    parts = body(3 * MiB)
    etag = await any_store.put_parts("big/plain", parts)
    stored = await any_store.get("big/plain")
    assert stored.data == parts.join()
    assert stored.etag == etag


async def test_a_read_split_gives_the_large_piece_apart(any_store: ObjectStore) -> None:
    parts = body(3 * MiB)
    middle = parts.buffers[1]
    await any_store.put_parts("big/split", parts, if_absent=True)
    found = await any_store.get_split("big/split", lambda look: Split(5, len(middle)))
    assert (found.before, found.after) == (b"head:", b":tail")
    assert found.piece == middle
    assert found.etag == (await any_store.head("big/split")).etag


async def test_a_small_object_read_split_is_cut_in_memory(any_store: ObjectStore) -> None:
    await any_store.put("small", b"head:abc:tail")
    found = await any_store.get_split("small", lambda look: Split(5, 3))
    assert (found.before, found.piece, found.after) == (b"head:", b"abc", b":tail")
    whole = await any_store.get_split("small", lambda look: None)
    assert (whole.before, whole.piece, whole.after) == (b"head:abc:tail", b"", b"")


async def test_conditions_hold_for_a_body_of_parts(any_store: ObjectStore) -> None:
    first = await any_store.put_parts("big/cond", body(2 * MiB), if_absent=True)
    with pytest.raises(AlreadyExists):
        await any_store.put_parts("big/cond", body(2 * MiB, seed=1), if_absent=True)
    with pytest.raises(PreconditionFailed):
        await any_store.put_parts("big/cond", body(2 * MiB, seed=2), if_match='"stale"')
    with pytest.raises((NotFound, PreconditionFailed)):  # (as put_if_match: 404 or 412)
        await any_store.put_parts("big/none", body(2 * MiB), if_match=first)
    second = await any_store.put_parts("big/cond", body(2 * MiB, seed=3), if_match=first)
    assert (await any_store.get("big/cond")).data == body(2 * MiB, seed=3).join()
    assert second != first


# -- S3: in parts ------------------------------------------------------------


@pytest.fixture
async def s3_parts(s3_bucket: str, moto_server: str) -> Any:
    store = S3Store(
        s3_bucket, "t", endpoint_url=moto_server, region="us-east-1", multipart=SMALL_PARTS
    )
    yield store
    await store.close()


@pytest.fixture
async def s3_conditional_parts(s3_bucket: str, moto_server: str) -> Any:
    settings = Multipart(threshold=5 * MiB, part_size=5 * MiB, conditional=True)
    store = S3Store(
        s3_bucket, "c", endpoint_url=moto_server, region="us-east-1", multipart=settings
    )
    yield store
    await store.close()


def _parts_of(etag: str) -> int:
    """How many parts S3 made an object of, from its etag (1: one PutObject)."""
    _, dash, count = etag.strip('"').partition("-")
    return int(count) if dash else 1


async def test_an_unconditional_large_body_goes_in_parts(s3_parts: S3Store, s3_admin: Any) -> None:
    parts = body(11 * MiB)
    etag = await s3_parts.put_parts("big", parts)
    assert _parts_of(etag) == 3  # 5 + 5 + 1 MiB
    assert (await s3_parts.get("big")).data == parts.join()
    plain = bytes(6 * MiB)
    assert _parts_of(await s3_parts.put("plain", plain)) == 2  # a bytes body too
    assert (await s3_parts.get("plain")).data == plain
    assert not s3_admin.list_multipart_uploads(Bucket=s3_parts.bucket).get("Uploads")


async def test_a_conditional_large_body_is_one_put_by_default(
    s3_parts: S3Store, s3_admin: Any
) -> None:
    """Not every provider holds a condition on a multipart upload's
    completion (moto ignores If-Match there), so by default a conditional
    write is one PutObject, whose conditions hold wherever check-store passes."""
    first = await s3_parts.put_parts("big", body(11 * MiB), if_absent=True)
    assert _parts_of(first) == 1
    with pytest.raises(AlreadyExists):
        await s3_parts.put_parts("big", body(11 * MiB, seed=1), if_absent=True)
    with pytest.raises(PreconditionFailed):
        await s3_parts.put_parts("big", body(11 * MiB, seed=2), if_match='"stale"')
    second = await s3_parts.put_parts("big", body(11 * MiB, seed=3), if_match=first)
    assert _parts_of(second) == 1
    assert (await s3_parts.get("big")).data == body(11 * MiB, seed=3).join()


async def test_create_if_absent_holds_in_parts_where_the_store_is_told_it_does(
    s3_conditional_parts: S3Store, s3_admin: Any
) -> None:
    """If-None-Match on CompleteMultipartUpload: AWS documents it, and moto
    holds it (the second create's completion is refused with 412). (moto
    ignores If-Match there, so its probe refuses the setting: the store here
    is told what a provider holding both would have shown.)"""
    store = s3_conditional_parts
    store.learned.multipart_conditions = True
    first = await store.put_parts("big", body(11 * MiB), if_absent=True)
    assert _parts_of(first) == 3
    with pytest.raises(AlreadyExists):
        await store.put_parts("big", body(11 * MiB, seed=1), if_absent=True)
    assert (await store.get("big")).data == body(11 * MiB).join()
    assert not s3_admin.list_multipart_uploads(Bucket=store.bucket).get("Uploads")


async def test_a_store_told_multipart_conditional_on_moto_refuses_before_it_relies_on_it(
    s3_conditional_parts: S3Store,
) -> None:
    """Why conditional multipart is off by default: moto ignores a stale
    If-Match on the completion (Ceph RGW 16 ignores If-None-Match there too;
    AWS documents both). A store told it holds them tries it before its
    first conditional write in parts, and refuses with one error instead of
    letting two writers both win."""
    store = s3_conditional_parts
    with pytest.raises(StoreConfigError, match="remove multipart_conditional=true"):
        await store.put_parts("big", body(11 * MiB), if_absent=True)
    assert store.learned.multipart_conditions is False
    assert [info.key async for info in store.scan()] == []


def test_a_conditional_body_past_one_put_is_refused_without_conditional_multipart() -> None:
    settings = Multipart()
    with pytest.raises(StoreError, match="multipart_conditional=true"):
        settings.in_parts(SINGLE_PUT_LIMIT + 1, True, "s3://b", "k")
    assert settings.in_parts(SINGLE_PUT_LIMIT + 1, False, "s3://b", "k")
    assert Multipart(conditional=True).in_parts(SINGLE_PUT_LIMIT + 1, True, "s3://b", "k")
    assert not settings.in_parts(settings.threshold - 1, False, "s3://b", "k")


def test_the_url_sets_multipart() -> None:
    from stepstone.store import open_store

    store = open_store(
        "s3://b/p?multipart_threshold=6291456&multipart_part_size=5242880"
        "&multipart_conditional=true"
    )
    assert isinstance(store, S3Store)
    assert store.multipart == Multipart(threshold=6 * MiB, part_size=5 * MiB, conditional=True)
    with pytest.raises(StoreError, match="part_size"):
        open_store("s3://b/p?multipart_part_size=1024")
    with pytest.raises(StoreError, match="multipart_conditional"):
        open_store("s3://b/p?multipart_conditional=maybe")


# -- streamed bodies, and large pieces handed over as they are read ------------


def streamed(size: int, seed: int = 0) -> tuple[Parts, list[int]]:
    """A body whose middle is a Stream of ``size`` bytes made a MiB at a
    time; and the list that counts how often it was made from the start."""
    made: list[int] = []
    middle = body(size, seed).buffers[1]

    def produce() -> Any:
        made.append(1)
        view = memoryview(middle)
        return (view[at : at + MiB] for at in range(0, len(view), MiB))

    return Parts([b"head:", Stream(len(middle), produce), b":tail"]), made


async def test_a_streamed_body_is_stored_as_its_bytes_joined(any_store: ObjectStore) -> None:
    parts, made = streamed(3 * MiB)
    etag = await any_store.put_parts("big/streamed", parts, if_absent=True)
    stored = await any_store.get("big/streamed")
    assert stored.data == body(3 * MiB).join()
    assert stored.etag == etag
    assert made  # (made as it was written, at least once)


async def test_a_streamed_body_goes_in_parts_on_s3(s3_parts: S3Store, s3_admin: Any) -> None:
    parts, made = streamed(11 * MiB, seed=4)
    assert _parts_of(await s3_parts.put_parts("big/streamed", parts)) == 3
    assert (await s3_parts.get("big/streamed")).data == body(11 * MiB, seed=4).join()
    assert len(made) == 1  # cut into parts once, as they were sent
    assert not s3_admin.list_multipart_uploads(Bucket=s3_parts.bucket).get("Uploads")


def test_a_stream_that_makes_other_than_its_size_is_refused() -> None:
    short = Parts([Stream(10, lambda: [b"12345"])])
    with pytest.raises(ValueError, match="made 5 bytes where 10 were counted"):
        short.join()
    long = Parts([Stream(3, lambda: [b"12345"])])
    with pytest.raises(ValueError, match="where 3 were counted"):
        long.join()


def test_a_body_reader_reads_a_stream_again_after_a_seek_back() -> None:
    parts, made = streamed(3 * MiB)
    reader = BodyReader(parts)
    first = reader.read()
    reader.seek(0)
    assert reader.read() == first == body(3 * MiB).join()
    reader.seek(5 + MiB + 3)
    assert reader.read(4) == first[5 + MiB + 3 : 5 + MiB + 7]
    assert len(made) == 3  # once for each read from before where the last left off


async def test_a_split_into_a_sink_hands_the_piece_over_in_bounded_views(
    any_store: ObjectStore,
) -> None:
    parts = body(3 * MiB)
    middle = parts.buffers[1]
    await any_store.put_parts("big/sunk", parts, if_absent=True)
    got: list[bytes] = []
    found = await any_store.get_split(
        "big/sunk", lambda look: Split(5, len(middle), into=lambda view: got.append(bytes(view)))
    )
    assert (found.before, found.piece, found.after) == (b"head:", b"", b":tail")
    assert b"".join(got) == middle
    assert max(map(len, got)) <= FEED


async def test_a_body_in_parts_on_a_real_server_answers_its_etag(real_s3_url: str) -> None:
    """Ceph RGW 16 answers a CompleteMultipartUpload with an empty ETag: the
    store reads it back (one HEAD), so the etag a write returns is always
    the one a swap can use."""
    from stepstone.store import open_store

    store = open_store(real_s3_url + "&multipart_threshold=5242880&multipart_part_size=5242880")
    try:
        etag = await store.put_parts("big/parts", body(11 * MiB))
        assert etag == (await store.head("big/parts")).etag and etag.strip('"')
        new = await store.put_if_match("big/parts", b"small now", etag)
        assert (await store.get("big/parts")).etag == new
    finally:
        await store.close()
