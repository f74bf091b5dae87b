"""S3Store: the contract on an S3-compatible bucket, over aiobotocore's async client.

Why it is built the way it is:

- **Conditional writes are S3's own**: create-if-absent is ``PutObject`` with
  ``If-None-Match: *``, compare-and-swap is ``PutObject`` with ``If-Match``,
  a fenced delete is ``DeleteObject`` with ``If-Match``. A large body is
  streamed, and goes in parts only where its condition holds on a
  multipart upload's completion (:mod:`stepstone.store.s3_large`).
- **Errors are classified once, here.** A 412 is an answer
  (PreconditionFailed, or AlreadyExists for a create) and is never retried;
  a 404 is NotFound; a missing bucket, refused credentials or a wrong region
  is one StoreConfigError naming the bucket; throttling, 5xx, timeouts and
  connection failures are retried with
  :class:`stepstone.store.wrappers.retry.RetryPolicy` and then become
  StoreUnavailable. botocore's own retries are switched off so the policy is
  the only one. A 409 ConditionalRequestConflict is a race, not an outage:
  it is decided by a re-read, under a budget of its own
  (:mod:`stepstone.store.conflicts`); a conditional write answered
  NotImplemented is a store without conditional writes, a StoreConfigError.
- **Throttling slows the process down.** A SlowDown (or 429) lowers the
  send rate of every request of the process to that partition of the bucket
  (first key segment), whichever store sends it, and successes raise it
  again (:mod:`stepstone.store.wrappers.throttle`): a crowd over a
  partition's limit sends less instead of retrying harder.
- **A retried write may already have landed.** If a try timed out or got a
  5xx after the request was sent, a later 412 may be our own earlier write.
  The store then reads the object back: if it holds exactly our bytes, the
  write is reported as done. See docs/storage.md for what that means.
- **One client per event loop, created lazily inside it.** aiohttp sessions
  belong to the loop that made them; tests and CLIs run several loops one
  after another, so the client is looked up by the running loop.

aiobotocore is imported on first use so ``import stepstone.store`` stays fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Literal, TypeVar

from . import s3_sessions as sessions
from .base import (
    DEFAULT_PAGE_SIZE,
    MAX_PRESIGNED_LIFETIME,
    ObjectInfo,
    ObjectStore,
    StoredObject,
)
from .conflicts import (
    CONFLICT_CODES,
    CONFLICT_RETRY,
    Undecided,
    WriteConflict,
    confirm_precondition,
    decide_delete,
    decide_put,
    through_conflicts,
)
from .errors import (
    AlreadyExists,
    InvalidKey,
    NotFound,
    PreconditionFailed,
    StoreConfigError,
    StoreError,
    StoreUnavailable,
    Throttled,
)
from .keys import MAX_KEY_LENGTH, validate_key, validate_prefix
from .parts import Body, Parts, SplitObject, Splitter
from .s3_answers import (
    CREDENTIAL_CODES,
    REGION_CODES,
    THROTTLING_CODES,
    TRANSIENT_CODES,
    answered,
    answered_size,
    maybe_applied,
    object_info,
    quoted,
    throttling,
)
from .s3_large import Multipart, put_in_parts, read_body, read_split, request_body
from .wrappers.retry import RetryPolicy
from .wrappers.throttle import AdaptiveRates, process_rates

T = TypeVar("T")


class _Ambiguous:
    """Whether an earlier try of this call may have been applied by S3
    (a stepstone.store.conflicts.Tried)."""

    def __init__(self) -> None:
        self.maybe_applied = False


class S3Store(ObjectStore):
    """An object store in an S3 bucket under ``prefix``; see the module docstring.

    ``endpoint_url`` points at an S3-compatible service (MinIO, R2, moto);
    ``region`` defaults to the usual AWS configuration. Credentials come from
    the usual AWS sources (environment, shared config/profile, instance role),
    or ``profile``. ``retry`` bounds the retries of transient failures.
    ``adaptive`` (on by default) slows the process's sends to the bucket
    when S3 answers SlowDown and lets them recover on successes, one budget
    for every store of the process on this endpoint and bucket
    (stepstone.store.wrappers.throttle.process_rates); an
    :class:`AdaptiveRates` of its own is used instead; False turns it off.
    ``conflicts`` budgets a write that meets concurrent ones (409s, see
    stepstone.store.conflicts). ``headers`` go with every request: a
    provider's own (Tigris: ``{"X-Tigris-Consistent": "true"}``).
    ``multipart`` says when a large body goes in parts (:class:`Multipart`).
    ``object_turns`` paces the writes to each object, for a store that
    limits them (GCS: about one a second per object; docs/storage.md).
    """

    remote = True

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        profile: str | None = None,
        retry: RetryPolicy | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        max_connections: int = 32,
        adaptive: bool | AdaptiveRates = True,
        conflicts: RetryPolicy = CONFLICT_RETRY,
        headers: dict[str, str] | None = None,
        multipart: Multipart | None = None,
        object_turns: bool = False,
    ) -> None:
        if not bucket or "/" in bucket:
            raise StoreConfigError(f"invalid bucket name {bucket!r}", location=f"s3://{bucket}")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.location = f"s3://{bucket}" + (f"/{self.prefix}" if self.prefix else "")
        if self.prefix:
            try:
                # leaving room for a key of one byte, after the slash
                validate_key(self.prefix, limit=MAX_KEY_LENGTH - 2)
            except InvalidKey as exc:
                raise StoreConfigError(
                    f"invalid prefix {prefix!r}: {exc.message}", location=self.location
                ) from exc
            self.key_limit = MAX_KEY_LENGTH - len(self.prefix.encode()) - 1
        self.endpoint_url = endpoint_url
        self.region = region
        self.profile = profile
        self.retry = retry or RetryPolicy()
        self.conflicts = conflicts
        self.headers = dict(headers or {})
        self.multipart = multipart or Multipart()
        if object_turns and adaptive is False:
            raise StoreConfigError(
                "object_turns paces writes through the adaptive send rates: "
                "it cannot go with adaptive=False",
                location=self.location,
            )
        if isinstance(adaptive, AdaptiveRates):
            rates: AdaptiveRates | None = adaptive
            if object_turns:
                adaptive.hot.every_object = True
        elif adaptive:
            rates = process_rates(f"{endpoint_url or ''}|{bucket}", object_turns=object_turns)
        else:
            rates = None
        self.send_rates = rates
        """The store's adaptive send rates (None: off); see
        stepstone.store.wrappers.throttle."""
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._max_connections = max_connections
        self._clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, asyncio.Task[tuple[Any, Any]]
        ] = weakref.WeakKeyDictionary()
        self._bucket_seen = False
        self.max_page = DEFAULT_PAGE_SIZE
        """The most keys one ListObjectsV2 request asks for (S3 answers at most 1000)."""

    # -- the client -----------------------------------------------------------

    async def _client(self) -> Any:
        loop = asyncio.get_running_loop()
        task = self._clients.get(loop)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = loop.create_task(self._create_client())
            self._clients[loop] = task
        _, client = await asyncio.shield(task)
        return client

    async def _create_client(self) -> tuple[Any, Any]:
        from aiobotocore.config import AioConfig

        try:
            session = sessions.session(self.profile)
            config = AioConfig(
                # (presigned URLs too: SigV2 ones are refused by newer regions)
                signature_version="s3v4",
                connect_timeout=self._connect_timeout,
                read_timeout=self._read_timeout,
                retries={"total_max_attempts": 1},  # our RetryPolicy is the only retry loop
                max_pool_connections=self._max_connections,
            )
            context = session.create_client(
                "s3", endpoint_url=self.endpoint_url, region_name=self.region, config=config
            )
            client = await context.__aenter__()
            if self.headers:
                client.meta.events.register("before-sign.s3", self._add_headers)
        except Exception as exc:
            raise StoreConfigError(
                f"cannot create an S3 client for bucket {self.bucket!r}: {exc}",
                location=self.location,
            ) from exc
        return context, client

    async def open(self) -> None:
        """Make the running loop's client now: botocore reads its service
        model and configuration, which costs an API process's first submit
        hundreds of milliseconds otherwise."""
        await self._client()

    async def close(self) -> None:
        """Close the client of the running loop; forget clients of other loops."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        tasks = dict(self._clients)
        self._clients.clear()
        for owner, task in tasks.items():
            if owner is not loop or not task.done() or task.cancelled() or task.exception():
                if not task.done():
                    with contextlib.suppress(RuntimeError):  # its loop may be closed
                        task.cancel()
                continue
            context, _ = task.result()
            await context.__aexit__(None, None, None)

    def _add_headers(self, request: Any, **_: Any) -> None:
        for name, value in self.headers.items():
            request.headers[name] = value

    # -- keys and errors --------------------------------------------------------

    def _full(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _relative(self, full: str) -> str:
        return full[len(self.prefix) + 1 :] if self.prefix else full

    def _classify(self, exc: Exception, key: str | None, conditional: str = "") -> Exception:
        """Turn a botocore/aiohttp failure into the StoreError the contract promises."""
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            HTTPClientError,
            NoCredentialsError,
            ParamValidationError,
            PartialCredentialsError,
            ReadTimeoutError,
        )
        from botocore.exceptions import (
            ConnectionError as BotoConnectionError,
        )

        loc = self.location
        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
            detail = error.get("Message") or code or f"HTTP {status}"
            if code in CONFLICT_CODES:
                return WriteConflict(f"S3 error {code}: {detail}", location=loc, key=key)
            if conditional and (code == "NotImplemented" or status == 501):
                return StoreConfigError(
                    f"this store does not support conditional writes ({detail}): stepstone "
                    "needs If-None-Match and If-Match on PutObject and DeleteObject; "
                    f"`stepstone check-store {loc}` says what is missing",
                    location=loc,
                    key=key,
                )
            if status == 412 or code == "PreconditionFailed":
                if conditional == "absent":
                    return AlreadyExists("object already exists", location=loc, key=key)
                return PreconditionFailed(f"etag mismatch: {detail}", location=loc, key=key)
            if code == "NoSuchBucket":
                return self._no_bucket()
            if code in ("NoSuchKey", "404") or status == 404:
                return NotFound("no such object", location=loc, key=key)
            if code in CREDENTIAL_CODES:
                return StoreConfigError(
                    f"S3 refused the credentials for bucket {self.bucket!r} ({code}): "
                    "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or the profile",
                    location=loc,
                    key=key,
                )
            if code in ("AccessDenied", "AllAccessDisabled", "403") or status == 403:
                return StoreConfigError(
                    f"access denied to bucket {self.bucket!r}: the credentials lack permission "
                    f"for this operation ({detail})",
                    location=loc,
                    key=key,
                )
            if code in REGION_CODES or status == 301:
                return StoreConfigError(
                    f"bucket {self.bucket!r} is in another region than {self.region!r}: "
                    f"set region= in the store URL ({detail})",
                    location=loc,
                    key=key,
                )
            if code in THROTTLING_CODES or status == 429:
                return Throttled(f"S3 error {code or status}: {detail}", location=loc, key=key)
            if code in TRANSIENT_CODES or status >= 500:
                return StoreUnavailable(
                    f"S3 error {code or status}: {detail}", location=loc, key=key
                )
            return StoreError(f"S3 error {code or status}: {detail}", location=loc, key=key)
        if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
            return StoreConfigError(
                f"no usable AWS credentials for bucket {self.bucket!r}: {exc}",
                location=loc,
                key=key,
            )
        if isinstance(exc, ParamValidationError):
            return StoreConfigError(
                f"S3 rejected the request for bucket {self.bucket!r}: {exc}", location=loc, key=key
            )
        if isinstance(exc, (BotoConnectionError, HTTPClientError, ReadTimeoutError)):
            return StoreUnavailable(f"cannot reach S3: {exc}", location=loc, key=key)
        if isinstance(exc, (OSError, asyncio.TimeoutError)):
            return StoreUnavailable(f"cannot reach S3: {exc!r}", location=loc, key=key)
        if isinstance(exc, BotoCoreError):
            return StoreError(f"S3 client error: {exc}", location=loc, key=key)
        try:
            import aiohttp

            if isinstance(exc, aiohttp.ClientError):
                return StoreUnavailable(f"cannot reach S3: {exc!r}", location=loc, key=key)
        except ImportError:  # pragma: no cover - aiobotocore depends on aiohttp
            pass
        return exc

    def _no_bucket(self) -> StoreConfigError:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return StoreConfigError(
            f"bucket {self.bucket!r} does not exist{where}", location=self.location
        )

    async def _call(
        self,
        key: str | None,
        request: Callable[[Any], Awaitable[T]],
        *,
        conditional: str = "",
        state: _Ambiguous | None = None,
        partition: str | None = None,
        reads: bool = False,
        expected: str | None = None,
    ) -> T:
        """Run one S3 request under the retry policy and the send rate of its
        partition (that of ``key``, or of the listing prefix ``partition``),
        with errors classified; ``expected``: a conditional write's etag."""

        rates = self.send_rates
        where = f"{self.location}/{key}" if key else self.location
        confirm = (
            partial(confirm_precondition, self, key, expected) if conditional and key else None
        )
        rate = (
            None
            if rates is None
            else rates.sending(
                partition or key or "",
                under=self.prefix,
                reads=reads,
                creates=conditional == "absent",
                location=where,
            )
        )

        async def attempt() -> T:
            client = await self._client()
            sent = 0.0 if rate is None else await rate.acquire(confirm=confirm)
            try:
                result = await request(client)
            except Exception as exc:
                if rate is not None:
                    rate.record(sent=sent, refused=throttling(exc))
                classified = self._classify(exc, key, conditional)
                if classified is exc:
                    raise
                raise classified from exc
            if rate is not None:
                rate.record(sent=sent, refused=False)
            self._bucket_seen = True
            return result

        def note(_: int, exc: BaseException) -> None:
            if state is not None and maybe_applied(exc):
                state.maybe_applied = True

        try:
            return await self.retry.run(attempt, on_retry=note)
        except StoreUnavailable as exc:
            if self.retry.attempts == 1:
                raise
            kind = Throttled if isinstance(exc, Throttled) else StoreUnavailable
            raise kind(
                f"{exc.message}; gave up after {self.retry.attempts} attempts",
                location=self.location,
                key=key,
            ) from exc

    async def _check_bucket(self, key: str) -> NotFound:
        """A HEAD's bare 404 cannot tell a missing key from a missing bucket; ask once."""
        if not self._bucket_seen:

            async def head_bucket(client: Any) -> None:
                await client.head_bucket(Bucket=self.bucket)

            try:
                await self._call(None, head_bucket)
            except NotFound as exc:
                raise self._no_bucket() from exc
        return NotFound("no such object", location=self.location, key=key)

    # -- the contract -------------------------------------------------------------

    async def _read(self, key: str, read: Callable[[Any, int], Awaitable[T]]) -> tuple[T, str]:
        """One GET: what ``read`` makes of its body (and Content-Length), and the etag."""
        validate_key(key, location=self.location, limit=self.key_limit)

        async def request(client: Any) -> tuple[T, str]:
            response = await client.get_object(Bucket=self.bucket, Key=self._full(key))
            size = answered_size(response, "ContentLength", location=self.location, key=key)
            etag = quoted(answered(response, "ETag", location=self.location, key=key))
            async with response["Body"] as body:
                return await read(body, size), etag

        # A GET's 404 says NoSuchKey or NoSuchBucket in its body: no guessing needed.
        return await self._call(key, request, reads=True)

    async def get(self, key: str) -> StoredObject:
        data, etag = await self._read(key, read_body)
        return StoredObject(key, data, etag)

    async def get_split(self, key: str, splitter: Splitter) -> SplitObject:
        """One GET, the large piece read straight into its own allocation."""
        (before, piece, after), etag = await self._read(key, read_split(splitter))
        return SplitObject(key, before, piece, after, etag)

    async def head(self, key: str) -> ObjectInfo:
        validate_key(key, location=self.location, limit=self.key_limit)

        async def request(client: Any) -> ObjectInfo:
            r = await client.head_object(Bucket=self.bucket, Key=self._full(key))
            return object_info(r, key, "ContentLength", location=self.location)

        try:
            return await self._call(key, request, reads=True)
        except NotFound as exc:
            raise await self._check_bucket(key) from exc

    async def _put(self, key: str, data: Body, conditional: str, **condition: str) -> str:
        validate_key(key, location=self.location, limit=self.key_limit)
        data = data if isinstance(data, Parts) else bytes(data)
        state = _Ambiguous()
        where = {"Bucket": self.bucket, "Key": self._full(key)}
        in_parts = self.multipart.in_parts(len(data), bool(conditional), self.location, key)

        async def request(client: Any) -> str:
            r = await client.put_object(
                **where, Body=request_body(data), ContentLength=len(data), **condition
            )
            return quoted(answered(r, "ETag", location=self.location, key=key))

        async def write() -> str:
            try:
                if in_parts:
                    args = (self._call, self.multipart, where, key, data, condition)
                    return quoted(await put_in_parts(*args, conditional, state))
                expected = condition.get("IfMatch")
                return await self._call(
                    key, request, conditional=conditional, state=state, expected=expected
                )
            except PreconditionFailed:
                if state.maybe_applied:
                    landed = await self.ours(key, data)
                    if landed is not None:
                        return landed
                raise

        async def decide() -> str | Literal[Undecided.UNDECIDED]:
            return await decide_put(self, key, data, conditional, condition.get("IfMatch"), state)

        return await through_conflicts(
            write, decide if conditional else None, self.conflicts, location=self.location, key=key
        )

    async def presign_put(self, key: str, expires_in: float) -> str | None:
        """A presigned PUT of ``key`` (SigV4), valid for ``expires_in`` seconds,
        capped at seven days (:class:`~stepstone.store.base.PresignsPuts`)."""
        validate_key(key, location=self.location, limit=self.key_limit)
        seconds = max(1, min(int(expires_in), MAX_PRESIGNED_LIFETIME))
        client = await self._client()
        params = {"Bucket": self.bucket, "Key": self._full(key)}
        try:
            url: str = await client.generate_presigned_url(
                "put_object", Params=params, ExpiresIn=seconds
            )
        except Exception as exc:
            classified = self._classify(exc, key)
            raise classified from exc
        return url

    async def ours(self, key: str, data: Body) -> str | None:
        """After an ambiguous retry lost: the etag if the object holds exactly ``data``."""
        try:
            current = await self.get(key)
        except NotFound:
            return None
        same = data.equals(current.data) if isinstance(data, Parts) else current.data == data
        return current.etag if same else None

    async def put(self, key: str, data: bytes) -> str:
        return await self._put(key, data, "")

    async def put_if_absent(self, key: str, data: bytes) -> str:
        return await self._put(key, data, "absent", IfNoneMatch="*")

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return await self._put(key, data, "match", IfMatch=etag)

    async def put_parts(
        self, key: str, parts: Parts, *, if_absent: bool = False, if_match: str | None = None
    ) -> str:
        if if_absent:
            return await self._put(key, parts, "absent", IfNoneMatch="*")
        if if_match is not None:
            return await self._put(key, parts, "match", IfMatch=if_match)
        return await self._put(key, parts, "")

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        validate_key(key, location=self.location, limit=self.key_limit)
        condition = {"IfMatch": if_match} if if_match is not None else {}
        conditional = "match" if condition else ""
        state = _Ambiguous()

        async def request(client: Any) -> None:
            await client.delete_object(Bucket=self.bucket, Key=self._full(key), **condition)

        async def write() -> None:
            try:
                await self._call(
                    key, request, conditional=conditional, state=state, expected=if_match
                )
            except NotFound:
                if state.maybe_applied:
                    return  # an earlier try deleted it; the object at our etag is gone
                raise

        async def decide() -> Literal[Undecided.UNDECIDED] | None:
            return await decide_delete(self, key, if_match, state)

        await through_conflicts(
            write, decide if condition else None, self.conflicts, location=self.location, key=key
        )

    async def list(
        self,
        prefix: str = "",
        *,
        start_after: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
    ) -> list[ObjectInfo]:
        validate_prefix(prefix, location=self.location)
        out: list[ObjectInfo] = []
        base = f"{self.prefix}/" if self.prefix else ""
        token: str | None = None
        while len(out) < limit:
            params: dict[str, Any] = {
                "Bucket": self.bucket,
                "Prefix": base + prefix,
                "MaxKeys": min(self.max_page, limit - len(out)),
            }
            if token is not None:
                params["ContinuationToken"] = token
            elif start_after is not None:
                params["StartAfter"] = base + start_after

            async def request(client: Any, params: dict[str, Any] = params) -> Any:
                return await client.list_objects_v2(**params)

            page = await self._call(None, request, partition=prefix, reads=True)
            for item in page.get("Contents", []):
                full = answered(item, "Key", location=self.location, key=None)
                out.append(
                    object_info(item, self._relative(str(full)), "Size", location=self.location)
                )
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or token is None:
                break
        return out[: max(0, limit)]
