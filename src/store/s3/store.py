"""S3Store: the contract on an S3-compatible bucket, over aiobotocore's async client.

Why it is built the way it is:

- **Conditional writes are S3's own**: create-if-absent is ``PutObject`` with
  ``If-None-Match: *``, compare-and-swap is ``PutObject`` with ``If-Match``,
  a fenced delete is ``DeleteObject`` with ``If-Match``. A large body is
  streamed, and goes in parts only where its condition holds on a
  multipart upload's completion (:mod:`stepstone.store.s3.large`).
- **Errors are classified once** (:mod:`stepstone.store.s3.classify`). A 412 is an answer
  (PreconditionFailed, or AlreadyExists for a create) and is never retried;
  a 404 is NotFound; a missing bucket, refused credentials or a wrong region
  is one StoreConfigError naming the bucket; throttling, 5xx, timeouts and
  connection failures are retried with
  :class:`stepstone.store.retry.RetryPolicy` and then become
  StoreUnavailable. botocore's own retries are switched off so the policy is
  the only one. A 409 ConditionalRequestConflict is a race, not an outage:
  it is decided by a re-read, under a budget of its own
  (:mod:`stepstone.store.s3.conflicts`); a conditional write answered
  NotImplemented is a store without conditional writes, a StoreConfigError.
- **Throttling slows the process down.** A SlowDown (or 429) lowers the
  send rate of every request of the process to that partition of the bucket
  (first key segment), whichever store sends it, and successes raise it
  again (:mod:`stepstone.store.s3.throttle`): a crowd over a
  partition's limit sends less instead of retrying harder.
- **A retried write may already have landed.** If a try timed out or got a
  5xx after the request was sent, a later 412 may be our own earlier write.
  Every conditional write carries a token of its own in its metadata; the
  store then reads the object's (one HEAD): if it is ours, the write is
  reported as done, never on equal bytes (stepstone.store.s3.husks).
- **Providers differ on conditions** (etags in quotes or not, DeleteObject
  ignoring If-Match, a multipart completion ignoring its condition): the
  store learns what its provider does from the answers, and fails with
  StoreConfigError rather than retry what the provider will always refuse
  (stepstone.store.s3.dialect).
- **One client per event loop, created lazily inside it.** aiohttp sessions
  belong to the loop that made them; tests and CLIs run several loops one
  after another, so the client is looked up by the running loop.

aiobotocore is imported on first use so ``import stepstone.store`` stays fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, TypeVar

from ..base import (
    DEFAULT_PAGE_SIZE,
    MAX_PRESIGNED_LIFETIME,
    ObjectInfo,
    ObjectStore,
    StoredObject,
)
from ..errors import (
    AlreadyExists,
    InvalidKey,
    NotFound,
    PreconditionFailed,
    StoreConfigError,
    StoreError,
    StoreUnavailable,
    Throttled,
)
from ..keys import MAX_KEY_LENGTH, validate_key, validate_prefix
from ..parts import Body, Parts, SplitObject, Splitter
from ..retry import RetryPolicy
from . import sessions
from .answers import (
    Looked,
    answered,
    answered_size,
    looked_at,
    maybe_applied,
    object_info,
    quoted,
    throttling,
)
from .classify import classify, no_bucket
from .conflicts import (
    CONFLICT_RETRY,
    Undecided,
    confirm_precondition,
    decide_delete,
    decide_put,
    through_conflicts,
)
from .dialect import (
    ETAG_QUOTES,
    REFUSALS,
    EtagQuotes,
    describe_provider,
    in_form,
    learned_for,
    refusal_named,
)
from .husks import (
    GUARD,
    HUSK_META,
    LOOK_AGAIN,
    STALE,
    WRITE_META,
    husk_body,
    token,
)
from .large import Multipart, put_in_parts, read_body, read_split, request_body
from .probes import MULTIPART_IGNORED, probe_conditional_delete, probe_multipart_conditions
from .throttle import AdaptiveRates, process_rates

T = TypeVar("T")


class _Ambiguous:
    """Whether an earlier try of this call may have been applied by S3
    (a stepstone.store.s3.conflicts.Tried)."""

    def __init__(self) -> None:
        self.maybe_applied = False


class _Again(enum.Enum):
    """Send the write again (the etag's other form, a husk gone)."""

    AGAIN = "again"


_AGAIN = _Again.AGAIN


@dataclass
class _Waited:
    """What one write has seen: the etag's form its last try was sent in;
    for a create, the husk in its way, since when, and its next pause."""

    form: str = ""
    etag: str = ""
    since: float = 0.0
    pause: float = 0.0


class _Replace(Exception):
    """A create found a stale husk: replace it by a swap on ``etag``."""

    def __init__(self, etag: str) -> None:
        super().__init__(etag)
        self.etag = etag


class _TooLate(Exception):
    """A husk's writer past its guard: the DELETE is not sent."""


class S3Store(ObjectStore):
    """An object store in an S3 bucket under ``prefix``; see the module docstring.

    ``endpoint_url`` points at an S3-compatible service (MinIO, R2, moto);
    ``region`` defaults to the usual AWS configuration. Credentials come from
    the usual AWS sources (environment, shared config/profile, instance role),
    or ``profile``. ``retry`` bounds the retries of transient failures.
    ``adaptive`` (on by default) slows the process's sends to the bucket
    when S3 answers SlowDown and lets them recover on successes, one budget
    for every store of the process on this endpoint and bucket
    (stepstone.store.s3.throttle.process_rates); an
    :class:`AdaptiveRates` of its own is used instead; False turns it off.
    ``conflicts`` budgets a write that meets concurrent ones (409s, see
    stepstone.store.s3.conflicts). ``headers`` go with every request: a
    provider's own (Tigris: ``{"X-Tigris-Consistent": "true"}``).
    ``multipart`` says when a large body goes in parts (:class:`Multipart`).
    ``object_turns`` paces the writes to each object, for a store that
    limits them (GCS: about one a second per object; docs/storage.md).
    ``etag_quotes`` says how ``If-Match`` carries an etag (``auto``: found
    out from the answers; ``quoted`` as AWS takes it; ``bare`` as Ceph RGW
    16 does), ``conditional_delete`` whether DeleteObject holds ``If-Match``
    (None: tried once; False: fenced deletes go through a husk), both
    as :mod:`stepstone.store.s3.dialect` says.
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
        etag_quotes: EtagQuotes = "auto",
        conditional_delete: bool | None = None,
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
        if etag_quotes not in ETAG_QUOTES:
            raise StoreConfigError(
                f"etag_quotes={etag_quotes!r}: use auto, quoted or bare", location=self.location
            )
        self.etag_quotes: EtagQuotes = etag_quotes
        self.conditional_delete = conditional_delete
        self.learned = learned_for(endpoint_url, bucket)
        """What this process learned of the provider (stepstone.store.s3.dialect)."""
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
        stepstone.store.s3.throttle."""
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._max_connections = max_connections
        self._clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, asyncio.Task[tuple[Any, Any]]
        ] = weakref.WeakKeyDictionary()
        self._bucket_seen = False
        self._probes: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, asyncio.Task[bool]]
        ] = weakref.WeakKeyDictionary()
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

    def bucket_key(self, key: str) -> str:
        """The key in the bucket of the store's ``key`` (under its prefix)."""
        return self._full(key)

    def if_match(self, etag: str) -> str:
        """``etag`` as this store sends it in If-Match (stepstone.store.s3.dialect)."""
        return in_form(etag, self._form())

    async def send(
        self, key: str, request: Callable[[Any], Awaitable[T]], *, conditional: str = ""
    ) -> T:
        """One request about ``key`` under the store's retries, send rates
        and error classes (``conditional``: "absent" or "match", how a 412
        reads); for the probes of stepstone.store.s3.probes."""
        return await self._call(key, request, conditional=conditional)

    def _relative(self, full: str) -> str:
        return full[len(self.prefix) + 1 :] if self.prefix else full

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
                classified = classify(exc, key, conditional, store=self)
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
                raise no_bucket(self) from exc
        return NotFound("no such object", location=self.location, key=key)

    # -- the contract -------------------------------------------------------------

    async def _read(self, key: str, read: Callable[[Any, int], Awaitable[T]]) -> tuple[T, str]:
        """One GET: what ``read`` makes of its body (and Content-Length), and
        the etag. A husk is no object (NotFound)."""
        validate_key(key, location=self.location, limit=self.key_limit)

        async def request(client: Any) -> tuple[T, str]:
            response = await client.get_object(Bucket=self.bucket, Key=self._full(key))
            if HUSK_META in (response.get("Metadata") or {}):
                response["Body"].close()
                raise NotFound("no such object", location=self.location, key=key)
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
        looked = await self._look(key)
        if looked.husk:
            raise NotFound("no such object", location=self.location, key=key)
        return looked.info

    async def _look(self, key: str) -> Looked:
        """One HEAD: the object's info, its metadata, and its age by the
        server's clock. Raises NotFound (a husk is returned, marked)."""
        validate_key(key, location=self.location, limit=self.key_limit)

        async def request(client: Any) -> Looked:
            r = await client.head_object(Bucket=self.bucket, Key=self._full(key))
            return looked_at(r, key, location=self.location)

        try:
            return await self._call(key, request, reads=True)
        except NotFound as exc:
            raise await self._check_bucket(key) from exc

    async def _put(
        self, key: str, data: Body, conditional: str, etag: str | None = None, **marks: str
    ) -> str:
        """Write ``data``: unconditionally, or if ``conditional`` is "absent"
        (a create) or "match" (a swap of version ``etag``), with a write
        token and ``marks`` in its metadata."""
        validate_key(key, location=self.location, limit=self.key_limit)
        if conditional and self.learned.broken:
            raise StoreConfigError(self.learned.broken, location=self.location, key=key)
        data = data if isinstance(data, Parts) else bytes(data)
        state = _Ambiguous()
        where = {"Bucket": self.bucket, "Key": self._full(key)}
        mine = token() if conditional else ""
        metadata = {WRITE_META: mine, **marks} if conditional else dict(marks)
        in_parts = self.multipart.in_parts(len(data), bool(conditional), self.location, key)
        if in_parts and conditional:
            await self._check_multipart_conditions()
        waited = _Waited()

        def condition() -> dict[str, str]:
            if conditional == "absent":
                return {"IfNoneMatch": "*"}
            if conditional == "match":
                assert etag is not None
                waited.form = self._form()  # (the form this try is sent in)
                return {"IfMatch": in_form(etag, waited.form)}
            return {}

        async def request(client: Any) -> str:
            r = await client.put_object(
                **where,
                Body=request_body(data),
                ContentLength=len(data),
                Metadata=metadata,
                **condition(),
            )
            return quoted(answered(r, "ETag", location=self.location, key=key))

        async def send() -> str:
            if in_parts:
                args = (self._call, self.multipart, where, key, data, condition())
                landed = await put_in_parts(*args, conditional, state, metadata)
                return quoted(landed) if landed.strip('"') else await self._etag_of(key, mine)
            return await self._call(
                key, request, conditional=conditional, state=state, expected=etag
            )

        async def write() -> str:
            while True:
                try:
                    landed = await send()
                except PreconditionFailed:
                    if not conditional:
                        raise
                    verdict = await self._refused(key, conditional, etag, mine, state, waited)
                    if verdict is _AGAIN:
                        continue
                    if verdict is None:
                        raise
                    return verdict
                except StoreUnavailable as failed:
                    if not (conditional and state.maybe_applied):
                        raise
                    return await self._in_doubt(key, conditional, etag, mine, failed)
                self._honoured(conditional)
                return landed

        async def decide() -> str | Literal[Undecided.UNDECIDED]:
            return await decide_put(self, key, mine, conditional, etag, state)

        return await through_conflicts(
            write, decide if conditional else None, self.conflicts, location=self.location, key=key
        )

    def _form(self) -> Literal["quoted", "bare"]:
        """The etag's form in If-Match: the setting's, or what was learned."""
        return self.learned.form if self.etag_quotes == "auto" else self.etag_quotes

    def _honoured(self, conditional: str) -> None:
        if conditional == "match":
            self.learned.swaps_seen = True
        elif conditional == "absent":
            self.learned.creates_seen = True
        if conditional:
            self.learned.refused = 0

    async def _refused(
        self,
        key: str,
        conditional: str,
        etag: str | None,
        mine: str,
        state: _Ambiguous,
        waited: _Waited,
    ) -> str | _Again | None:
        """After a conditional write was refused (412): its etag if an earlier
        try of it landed (by its token), _AGAIN to send it again, or None
        for the refusal to stand. Reads the key (one HEAD) only when the
        refusal may not be what it says: an earlier try may have landed; no
        swap (create) has landed yet here, so the store may be refusing a
        condition that holds (dialect); a create may have met a husk."""
        learned = self.learned
        look = state.maybe_applied or not (
            learned.swaps_seen if conditional == "match" else learned.creates_seen
        )
        if conditional == "absent" and not look:
            look = not await self._deletes_hold()  # (a husk may stand there)
        if not look:
            return None
        try:
            seen = await self._look(key)
        except NotFound:
            if conditional == "match":
                # A swap on a missing key: 412 on Ceph RGW, 404 on AWS; the contract says NotFound.
                raise NotFound("no such object", location=self.location, key=key) from None
            return self._contradiction("a create on a key that does not exist", key)
        if mine and seen.token == mine:
            self._honoured(conditional)
            return seen.info.etag  # an earlier try of ours landed
        if conditional == "absent":
            if seen.husk:
                return await self._over_husk(key, seen, waited)
            return None
        assert etag is not None
        if seen.husk or seen.info.etag != quoted(etag) or learned.swaps_seen:
            return None  # a lost race
        if waited.form != self._form():
            return _AGAIN  # sent in the form another write has since found refused
        if self.etag_quotes == "auto":
            learned.form = "bare" if learned.form == "quoted" else "quoted"
        return self._contradiction("a compare-and-swap on the etag the store had just given", key)

    async def _in_doubt(
        self, key: str, conditional: str, etag: str | None, mine: str, failed: StoreUnavailable
    ) -> str:
        """Every try of a conditional write failed and one may have been
        applied: decide by the write token the object holds (one HEAD). Ours:
        it landed. Another write's: it lost, as a 412 would say. As it was
        (or the HEAD fails too): ``failed`` stands, the write did not land or
        cannot be known to have."""
        try:
            seen = await self._look(key)
        except StoreError:  # (NotFound too: a create that did not land, a swap's key gone)
            raise failed from None
        if seen.token == mine:
            self._honoured(conditional)
            return seen.info.etag
        if conditional == "match" and not seen.husk and seen.info.etag == quoted(etag or ""):
            raise failed
        if conditional == "absent" and seen.husk:
            raise failed
        error = AlreadyExists if conditional == "absent" else PreconditionFailed
        raise error(
            "another write landed while this one's answers were lost",
            location=self.location,
            key=key,
        ) from failed

    def _contradiction(self, what: str, key: str) -> _Again:
        """The store refused a condition that held: try again, until
        :data:`REFUSALS` such refusals with none honoured make it unusable."""
        learned = self.learned
        learned.refused += 1
        if learned.refused >= REFUSALS:
            learned.broken = refusal_named(self.etag_quotes, self._form(), what)
            raise StoreConfigError(learned.broken, location=self.location, key=key)
        return _AGAIN

    async def _over_husk(self, key: str, seen: Looked, waited: _Waited) -> _Again:
        """A create found a husk: wait for its writer to remove it, or
        replace it once it is stale (docs in stepstone.store.s3.husks)."""
        now = time.monotonic()
        if waited.etag != seen.info.etag:
            waited.etag, waited.since, waited.pause = seen.info.etag, now, LOOK_AGAIN[0]
        if max(now - waited.since, seen.age) < STALE:
            await asyncio.sleep(waited.pause)
            waited.pause = min(LOOK_AGAIN[1], waited.pause * 2)
            return _AGAIN
        raise _Replace(seen.info.etag)

    async def _etag_of(self, key: str, mine: str) -> str:
        """The etag of the object a multipart upload just made, where its
        completion answered none (Ceph RGW): one HEAD."""
        seen = await self._look(key)
        if mine and seen.token != mine:
            raise PreconditionFailed(
                "another write replaced this one as it completed", location=self.location, key=key
            )
        return seen.info.etag

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
            classified = classify(exc, key, "", store=self)
            if classified is exc:
                raise
            raise classified from exc
        return url

    async def ours(self, key: str, mine: str) -> str | None:
        """After an ambiguous try: the etag if the object holds the write
        whose token is ``mine`` (one HEAD)."""
        try:
            seen = await self._look(key)
        except NotFound:
            return None
        return seen.info.etag if mine and seen.token == mine else None

    async def put(self, key: str, data: bytes) -> str:
        return await self._put(key, data, "")

    async def put_if_absent(self, key: str, data: bytes) -> str:
        return await self._create(key, data)

    async def _create(self, key: str, data: Body) -> str:
        """Create-if-absent; where a stale husk stands, replace it by a swap."""
        while True:
            try:
                return await self._put(key, data, "absent")
            except _Replace as stale:
                try:
                    return await self._put(key, data, "match", stale.etag)
                except (PreconditionFailed, NotFound):
                    continue  # another creator replaced it first, or its writer removed it

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return await self._put(key, data, "match", etag)

    async def put_parts(
        self, key: str, parts: Parts, *, if_absent: bool = False, if_match: str | None = None
    ) -> str:
        if if_absent:
            return await self._create(key, parts)
        if if_match is not None:
            return await self._put(key, parts, "match", if_match)
        return await self._put(key, parts, "")

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        validate_key(key, location=self.location, limit=self.key_limit)
        if if_match is not None and not await self._deletes_hold():
            await self._retire(key, if_match)
            return
        conditional = "match" if if_match is not None else ""
        state = _Ambiguous()

        async def request(client: Any) -> None:
            condition = {} if if_match is None else {"IfMatch": in_form(if_match, self._form())}
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
            write, decide if conditional else None, self.conflicts, location=self.location, key=key
        )

    async def _retire(self, key: str, etag: str) -> None:
        """A fenced delete where DeleteObject ignores If-Match: a swap of
        ``etag`` to a husk, then its removal (stepstone.store.s3.husks)."""
        sent = time.monotonic()
        await self._put(key, husk_body(token()), "match", etag, **{HUSK_META: "1"})

        async def request(client: Any) -> None:
            if time.monotonic() - sent >= GUARD:
                raise _TooLate()
            await client.delete_object(Bucket=self.bucket, Key=self._full(key))

        with contextlib.suppress(_TooLate):  # a create replaces it once it is stale
            await self._call(key, request)

    async def _deletes_hold(self) -> bool:
        """Whether DeleteObject holds If-Match here: the setting, or tried
        once per process and bucket before the first fenced delete."""
        if self.conditional_delete is not None:
            return self.conditional_delete
        learned = self.learned
        if learned.conditional_delete is None:
            found = await self._once("delete", probe_conditional_delete)
            learned.conditional_delete = found
        return learned.conditional_delete

    async def provider_notes(self) -> list[str]:
        """What this store found out of its provider (stepstone.store.base.ProviderNotes)."""
        learned = self.learned
        if learned.multipart_conditions is None:
            learned.multipart_conditions = await self._once("multipart", probe_multipart_conditions)
        return describe_provider(
            learned,
            etag_quotes=self.etag_quotes,
            conditional_delete=await self._deletes_hold(),
            told_delete=self.conditional_delete is not None,
            multipart_conditional=self.multipart.conditional,
        )

    async def _once(self, name: str, probe: Callable[[S3Store], Coroutine[Any, Any, bool]]) -> bool:
        """``probe(self)``, run once however many writes await it at the same
        time on this event loop (the writes of a worker's first seconds)."""
        loop = asyncio.get_running_loop()
        running = self._probes.setdefault(loop, {})
        task = running.get(name)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = running[name] = loop.create_task(probe(self))
        return await asyncio.shield(task)

    async def _check_multipart_conditions(self) -> None:
        """Before the first conditional write in parts: refuse a store that
        ignores the condition on a multipart upload's completion."""
        learned = self.learned
        if learned.multipart_conditions is None:
            learned.multipart_conditions = await self._once("multipart", probe_multipart_conditions)
        if not learned.multipart_conditions:
            raise StoreConfigError(MULTIPART_IGNORED, location=self.location)

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
