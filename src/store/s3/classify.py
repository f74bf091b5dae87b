"""S3's failures as the store contract's errors, classified once, here.

A 412 is an answer (PreconditionFailed, or AlreadyExists for a create); a
404 is NotFound; a missing bucket, refused credentials or a wrong region is
one StoreConfigError naming the bucket; throttling, 5xx, timeouts and
connection failures are StoreUnavailable (Throttled for throttling), which
the store retries; a 409 ConditionalRequestConflict is a WriteConflict
(stepstone.store.s3.conflicts); a conditional write answered NotImplemented
is a store without conditional writes, a StoreConfigError.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from ..errors import (
    AlreadyExists,
    NotFound,
    PreconditionFailed,
    StoreConfigError,
    StoreError,
    StoreUnavailable,
    Throttled,
)
from .answers import CREDENTIAL_CODES, REGION_CODES, THROTTLING_CODES, TRANSIENT_CODES
from .conflicts import CONFLICT_CODES, WriteConflict


class Named(Protocol):
    """What an error names of its store."""

    location: str
    bucket: str
    region: str | None
    endpoint_url: str | None


def classify(exc: Exception, key: str | None, conditional: str, *, store: Named) -> Exception:
    """Turn a botocore/aiohttp failure into the StoreError the contract promises
    (``conditional``: "absent" or "match", how a 412 reads)."""
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

    loc = store.location
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
            return no_bucket(store)
        if code in ("NoSuchKey", "404") or status == 404:
            return NotFound("no such object", location=loc, key=key)
        if code in CREDENTIAL_CODES:
            return StoreConfigError(
                f"S3 refused the credentials for bucket {store.bucket!r} ({code}): "
                "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or the profile",
                location=loc,
                key=key,
            )
        if code in ("AccessDenied", "AllAccessDisabled", "403") or status == 403:
            return StoreConfigError(
                f"access denied to bucket {store.bucket!r}: the credentials lack permission "
                f"for this operation ({detail})",
                location=loc,
                key=key,
            )
        if code in REGION_CODES or status == 301:
            return StoreConfigError(
                f"bucket {store.bucket!r} is in another region than {store.region!r}: "
                f"set region= in the store URL ({detail})",
                location=loc,
                key=key,
            )
        if code in THROTTLING_CODES or status == 429:
            return Throttled(f"S3 error {code or status}: {detail}", location=loc, key=key)
        if code in TRANSIENT_CODES or status >= 500:
            return StoreUnavailable(f"S3 error {code or status}: {detail}", location=loc, key=key)
        return StoreError(f"S3 error {code or status}: {detail}", location=loc, key=key)
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return StoreConfigError(
            f"no usable AWS credentials for bucket {store.bucket!r}: {exc}",
            location=loc,
            key=key,
        )
    if isinstance(exc, ParamValidationError):
        return StoreConfigError(
            f"S3 rejected the request for bucket {store.bucket!r}: {exc}", location=loc, key=key
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


def no_bucket(store: Named) -> StoreConfigError:
    """The error of a bucket that does not exist."""
    where = f" at {store.endpoint_url}" if store.endpoint_url else ""
    return StoreConfigError(
        f"bucket {store.bucket!r} does not exist{where}", location=store.location
    )
