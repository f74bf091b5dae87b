"""Trying what a provider holds, once per process and bucket, on a scratch key.

Two properties of a provider cannot be seen in the answers to the engine's
own writes, because a store that lacks them answers as one that has them
would (stepstone.store.s3.dialect): a DeleteObject that ignores If-Match
deletes and answers 204, a CompleteMultipartUpload that ignores
If-None-Match overwrites and answers 200. So each is tried before it is
first relied on, under the store's prefix in ``stepstone-probes/``, with
a key of its own removed afterwards: a handful of requests a process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from ..base import ObjectInfo
from ..errors import NotFound, PreconditionFailed, StoreConfigError, StoreError
from .answers import error_answer
from .husks import PROBES, token

T = TypeVar("T")

MULTIPART_IGNORED = (
    "this store ignores If-None-Match or If-Match on CompleteMultipartUpload (a multipart "
    "upload over an existing object replaced it), so it cannot hold a condition on a write in "
    "parts: remove multipart_conditional=true from the store URL (conditional writes "
    "then go in one PutObject, up to 5 GiB); `stepstone check-store` tries it"
)


class Prober(Protocol):
    """What a probe asks of an S3Store."""

    bucket: str

    def bucket_key(self, key: str) -> str: ...

    def if_match(self, etag: str) -> str: ...

    async def put(self, key: str, data: bytes) -> str: ...

    async def head(self, key: str) -> ObjectInfo: ...

    async def delete(self, key: str, *, if_match: str | None = None) -> None: ...

    async def send(
        self, key: str, request: Callable[[Any], Awaitable[T]], *, conditional: str = ""
    ) -> T: ...


async def probe_conditional_delete(store: Prober) -> bool:
    """Whether DeleteObject holds If-Match: a delete at a stale etag must
    leave the object (an answer of NotImplemented is a no)."""
    key = f"{PROBES}delete-{token()}"
    stale = await store.put(key, b"stepstone probe: a stale version")
    await store.put(key, b"stepstone probe: the current version")

    async def delete(client: Any) -> None:
        await client.delete_object(
            Bucket=store.bucket, Key=store.bucket_key(key), IfMatch=store.if_match(stale)
        )

    try:
        try:
            await store.send(key, delete, conditional="match")
        except (PreconditionFailed, NotFound):
            return True
        except StoreConfigError as exc:
            answer = error_answer(exc.__cause__)
            if answer is not None and (answer[0] == "NotImplemented" or answer[1] == 501):
                return False
            raise
        try:
            await store.head(key)
        except NotFound:
            return False
        return True
    finally:
        with contextlib.suppress(StoreError):
            await store.delete(key)


async def probe_multipart_conditions(store: Prober) -> bool:
    """Whether CompleteMultipartUpload holds its conditions: completing an
    upload of one small part over an existing key must be refused, under
    ``If-None-Match: *`` and under ``If-Match`` with a stale etag (moto holds
    the first and ignores the second; Ceph RGW 16 ignores both)."""
    key = f"{PROBES}multipart-{token()}"
    where = {"Bucket": store.bucket, "Key": store.bucket_key(key)}
    stale = await store.put(key, b"stepstone probe: a stale version")
    await store.put(key, b"stepstone probe: the current version")
    try:
        for condition in ({"IfNoneMatch": "*"}, {"IfMatch": store.if_match(stale)}):
            if not await _completion_refused(store, key, where, condition):
                return False
        return True
    finally:
        with contextlib.suppress(StoreError):
            await store.delete(key)


async def _completion_refused(
    store: Prober, key: str, where: dict[str, str], condition: dict[str, str]
) -> bool:
    """Whether an upload over ``key`` completed under ``condition`` is refused."""

    async def create(client: Any) -> str:
        return str((await client.create_multipart_upload(**where))["UploadId"])

    upload = await store.send(key, create)

    async def send_part(client: Any) -> str:
        body = b"stepstone probe: a version in parts"
        answer = await client.upload_part(**where, UploadId=upload, PartNumber=1, Body=body)
        return str(answer["ETag"])

    async def complete(client: Any) -> None:
        parts = [{"PartNumber": 1, "ETag": part}]
        await client.complete_multipart_upload(
            **where, UploadId=upload, MultipartUpload={"Parts": parts}, **condition
        )

    async def abort(client: Any) -> None:
        await client.abort_multipart_upload(**where, UploadId=upload)

    part = await store.send(key, send_part)
    try:
        await store.send(
            key, complete, conditional="absent" if "IfNoneMatch" in condition else "match"
        )
    except (PreconditionFailed, NotFound):
        with contextlib.suppress(StoreError):
            await store.send(key, abort)
        return True
    return False
