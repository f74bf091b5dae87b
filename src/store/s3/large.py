"""Large bodies on S3: written in parts or streamed, read into one allocation.

Why each of these is so:

- **A body is streamed, never handed over as one ``bytes``.** botocore and
  aiohttp make a copy of a ``bytes`` body on its way out; read from a
  file-like object (:class:`BodyReader`, over the buffers of
  :class:`stepstone.store.parts.Parts` where they lie) a body costs a
  read buffer, so a value of many megabytes is not in memory twice.
- **Above ``Multipart.threshold`` an unconditional write is a multipart
  upload**, ``Multipart.part_size`` a part, a few parts at once, each part
  retried on its own (a failure late in a large body does not send it all
  again); an upload that fails is aborted.
- **A conditional write stays one PutObject up to 5 GiB** unless the store
  is told that its provider holds the condition on the completion of a
  multipart upload (``Multipart.conditional``). AWS documents
  ``If-None-Match`` and ``If-Match`` on CompleteMultipartUpload; providers
  that do not hold them there (moto ignores ``If-Match`` on it) would let
  two writers of one memo or outcome both "win", and the engine's
  first-writer-wins would be gone without a sign. One PutObject holds its
  condition wherever ``stepstone check-store`` passes, and streamed it costs
  no more memory than the parts would. A conditional body over 5 GiB on a
  store not so told is refused, naming the setting.
- **A large object is read into an allocation of its size** (its
  Content-Length), filled as the answer streams in
  (:class:`stepstone.store.parts.Allocation`), not gathered in chunks and
  joined; ``get_split`` fills the large piece of a record alone, or hands
  its bytes to whatever decodes them as they come (``Split.into``), a
  read buffer at a time.
- **A streamed body** (:class:`stepstone.store.parts.Stream`, a value
  encoded as it is sent) is never made whole: one PutObject reads it
  forward, making it again if botocore seeks back; in parts, a part is
  made only when fewer than ``at_once`` parts are in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..errors import StoreError
from ..parts import SPLIT_LOOK, Allocation, Parts, Sink, Splitter

T = TypeVar("T")

MiB = 1 << 20
SINGLE_PUT_LIMIT = 5 * 1024 * MiB
"""The largest object one PutObject writes (S3's limit)."""
MULTIPART_LIMIT = 10_000
"""The most parts one multipart upload has (S3's limit)."""
READ_CHUNK = MiB
"""How much of an answer's body one read into an allocation asks for."""
WHOLE_READ = MiB
"""Bodies under this size are read in one ``read`` (no allocation to fill)."""


@dataclass(frozen=True, slots=True)
class Multipart:
    """When an S3Store writes in parts, and how (see the module docstring)."""

    threshold: int = 16 * MiB
    """Bodies of at least this many bytes go in parts (if unconditional, or
    ``conditional``); smaller ones in one PutObject."""
    part_size: int = 8 * MiB
    """The size of each part but the last (S3 takes 5 MiB to 5 GiB)."""
    at_once: int = 4
    """Parts of one upload sent at the same time."""
    conditional: bool = False
    """Whether the provider holds ``If-None-Match`` and ``If-Match`` on
    CompleteMultipartUpload, so conditional writes may go in parts too.
    AWS documents that it does; ``stepstone check-store`` tries it."""

    def __post_init__(self) -> None:
        if self.part_size < 5 * MiB or self.threshold < 1 or self.at_once < 1:
            raise ValueError(
                "multipart: part_size takes at least 5 MiB (S3's smallest part), "
                "threshold and at_once at least 1"
            )

    def in_parts(self, size: int, conditional: bool, location: str, key: str) -> bool:
        """Whether a body of ``size`` goes in parts; StoreError when it
        cannot go at all (a conditional one over 5 GiB, not ``conditional``)."""
        if conditional and not self.conditional:
            if size > SINGLE_PUT_LIMIT:
                raise StoreError(
                    f"a conditional write of {size} bytes is larger than one PutObject "
                    "takes (5 GiB), and this store is not set to trust conditions on "
                    "multipart uploads: set multipart_conditional=true in the store URL "
                    "(S3Store(multipart=Multipart(conditional=True))) once "
                    "`stepstone check-store` says the provider holds them",
                    location=location,
                    key=key,
                )
            return False
        return size >= self.threshold


class BodyReader(io.RawIOBase):
    """A file-like view of a body's buffers, for a request to stream from
    (botocore reads it for its checksums and seeks back; a retry starts
    a new one). Read forward, a :class:`stepstone.store.parts.Stream` in
    it is made as it is read; a seek back starts the body over."""

    def __init__(self, body: Parts | bytes) -> None:
        self._body = body if isinstance(body, Parts) else Parts([body])
        self._size = self._body.size
        self._pos = 0
        self._start_over()

    def _start_over(self) -> None:
        self._chunks = self._body.chunks()
        self._chunk = memoryview(b"")
        self._chunk_at = 0  # where ``_chunk`` starts in the body

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, out: Any) -> int:
        target = memoryview(out).cast("B")
        done = 0
        if self._pos < self._chunk_at:
            self._start_over()
        while done < len(target) and self._pos < self._size:
            end = self._chunk_at + len(self._chunk)
            if self._pos >= end:
                self._chunk_at = end
                self._chunk = memoryview(next(self._chunks, b""))
                if not self._chunk:
                    break
                continue
            at = self._pos - self._chunk_at
            taken = min(len(target) - done, end - self._pos)
            target[done : done + taken] = self._chunk[at : at + taken]
            done += taken
            self._pos += taken
        return done

    def __len__(self) -> int:
        return self._size


STREAMED = MiB
"""Bodies from this size on are streamed from a :class:`BodyReader`."""


def request_body(body: Parts | bytes) -> bytes | BodyReader:
    """What a request sends ``body`` as: a small one as bytes, a large one streamed."""
    if len(body) < STREAMED:
        return body if isinstance(body, bytes) else body.join()
    return BodyReader(body)


class Requester(Protocol):
    """S3Store's one request under its retries, send rates and error classes."""

    def __call__(
        self,
        key: str | None,
        request: Callable[[Any], Awaitable[T]],
        *,
        conditional: str = "",
        state: Any = None,
    ) -> Awaitable[T]: ...


async def put_in_parts(
    call: Requester,
    settings: Multipart,
    where: dict[str, str],
    key: str,
    data: Parts | bytes,
    condition: dict[str, str],
    conditional: str,
    state: Any,
    metadata: dict[str, str] | None = None,
) -> str:
    """Write ``data`` at ``where`` (Bucket, Key) as a multipart upload with
    ``metadata``, the condition on its completion; returns the S3 etag as
    the completion answered it (empty on Ceph RGW; aborted on failure)."""
    body = data if isinstance(data, Parts) else Parts([data])
    part_size = max(settings.part_size, -(-body.size // MULTIPART_LIMIT))

    async def create(client: Any) -> str:
        answer = await client.create_multipart_upload(**where, Metadata=metadata or {})
        return str(answer["UploadId"])

    upload = await call(key, create)
    in_flight = asyncio.Semaphore(settings.at_once)

    async def send(number: int, piece: Parts) -> dict[str, Any]:
        async def request(client: Any) -> dict[str, Any]:
            answer = await client.upload_part(
                **where,
                UploadId=upload,
                PartNumber=number,
                Body=BodyReader(piece),
                ContentLength=piece.size,
            )
            sums = {k: v for k, v in answer.items() if k.startswith("Checksum") and v}
            return {"PartNumber": number, "ETag": answer["ETag"]} | sums

        try:
            return await call(key, request)
        finally:
            in_flight.release()

    async def complete(client: Any) -> str:
        answer = await client.complete_multipart_upload(
            **where, UploadId=upload, MultipartUpload={"Parts": parts}, **condition
        )
        return str(answer["ETag"])

    try:
        async with asyncio.TaskGroup() as group:
            sent: list[asyncio.Task[dict[str, Any]]] = []
            # A part is cut (a streamed one made) only once fewer than
            # ``at_once`` are in flight: at most that many are in memory.
            pieces = enumerate(body.slices(part_size), start=1)
            while True:
                await in_flight.acquire()
                taken = next(pieces, None)
                if taken is None:
                    break
                sent.append(group.create_task(send(*taken)))
        parts = [task.result() for task in sent]
        return await call(key, complete, conditional=conditional, state=state)
    except BaseException as exc:
        await _abort(call, where, key, upload)
        if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            raise exc.exceptions[0] from None  # (one part's error, as the caller knows them)
        raise


async def _abort(call: Requester, where: dict[str, str], key: str, upload: str) -> None:
    """Abort an upload that will not complete (its parts are billed until then)."""

    async def abort(client: Any) -> None:
        await client.abort_multipart_upload(**where, UploadId=upload)

    with contextlib.suppress(Exception):  # a lifecycle rule removes what is left
        await asyncio.shield(call(key, abort))


async def read_body(body: Any, size: int, head: bytes = b"") -> bytes:
    """An answer's whole body of Content-Length ``size`` (of which ``head``
    is read already), a large one read into its own allocation."""
    if size < WHOLE_READ:
        return head + bytes(await body.read())
    allocation = Allocation(size)
    try:
        allocation.view[: len(head)] = head
        await _fill(body, allocation.view[len(head) :])
    except BaseException:
        allocation.drop()
        raise
    return allocation.taken()


def read_split(splitter: Splitter) -> Callable[[Any, int], Awaitable[tuple[bytes, bytes, bytes]]]:
    """What reads an answer's body of Content-Length ``size`` in the pieces
    ``splitter`` finds in its first bytes (``ObjectStore.get_split``):
    before, the large piece (its own allocation), after."""

    async def read(body: Any, size: int) -> tuple[bytes, bytes, bytes]:
        return await _read_split(body, size, splitter)

    return read


async def _read_split(body: Any, size: int, splitter: Splitter) -> tuple[bytes, bytes, bytes]:
    look = bytearray()
    while len(look) < min(size, SPLIT_LOOK):
        chunk = await body.read(min(size, SPLIT_LOOK) - len(look))
        if not chunk:
            break
        look += chunk
    head = bytes(look)
    split = splitter(head)
    if split is None or split.start > len(head) or split.start + split.length > size:
        return await read_body(body, size, head), b"", b""
    end = split.start + split.length
    early = head[split.start : end]
    if split.into is not None:
        split.into(memoryview(early))
        await _hand_over(body, split.length - len(early), split.into)
        piece = b""
    else:
        allocation = Allocation(split.length)
        try:
            allocation.view[: len(early)] = early
            await _fill(body, allocation.view[len(early) :])
        except BaseException:
            allocation.drop()
            raise
        piece = allocation.taken()
    after = head[end:] if end < len(head) else await body.read()
    return head[: split.start], piece, bytes(after)


async def _hand_over(body: Any, length: int, into: Sink) -> None:
    """The answer's next ``length`` bytes handed to ``into``, read into one
    buffer of ``READ_CHUNK`` bytes again and again."""
    view = memoryview(bytearray(min(READ_CHUNK, length)))
    for done in range(0, length, len(view) or 1):
        taken = view[: min(len(view), length - done)]
        await _fill(body, taken)
        into(taken)


async def _fill(body: Any, view: memoryview) -> None:
    done = 0
    while done < len(view):
        got = await body.readinto(view[done : done + READ_CHUNK])
        if not got:
            raise OSError(f"the answer ended {len(view) - done} bytes short of its length")
        done += got
