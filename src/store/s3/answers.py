"""S3's error codes, by what each asks of a client: send less, try again, fix
the configuration. The S3Store classifies every answer by these
(stepstone.store.s3), and the throttle and the retries act on the class:
:func:`throttling` says a failure asked to send less, :func:`maybe_applied`
whether a failed try may still have been applied."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

from ..base import ObjectInfo
from ..errors import StoreError
from .conflicts import CONFLICT_CODES
from .husks import HUSK_META, WRITE_META

THROTTLING_CODES = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "RequestThrottledException",
    "RequestLimitExceeded",
    "TooManyRequests",
    "TooManyRequestsException",
    "BandwidthLimitExceeded",
    "LimitExceededException",
}
"""Answers that ask the client to send less (as do 429s): S3's SlowDown and
botocore's throttling codes. They cut the store's send rate
(stepstone.store.s3.throttle)."""
REFUSED_CODES = THROTTLING_CODES | CONFLICT_CODES
"""Transient answers S3 gives before doing any work: a retry after one of
these cannot meet its own earlier write."""
TRANSIENT_CODES = REFUSED_CODES | {
    "RequestTimeout",
    "RequestTimeoutException",
    "InternalError",
    "ServiceUnavailable",
}
CREDENTIAL_CODES = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
    "InvalidSecurity",
}
REGION_CODES = {"PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraint"}


def quoted(etag: str) -> str:
    """An ETag as S3 sends it in a condition: in double quotes."""
    return etag if etag.startswith('"') else f'"{etag}"'


def answered(answer: Any, name: str, *, location: str, key: str | None) -> Any:
    """A field every S3 answer of its kind holds (an ETag, a Content-Length, a
    LastModified). An answer without it comes from a gateway or proxy that drops
    what S3 sends: a store stepstone cannot read, named with the field and the
    key, never a bare ``KeyError``, and not retried (the same gateway would give
    the same answer)."""
    value = answer.get(name) if isinstance(answer, Mapping) else None
    if value is None:
        raise StoreError(f"the store's answer holds no {name}", location=location, key=key)
    return value


def answered_size(answer: Any, name: str, *, location: str, key: str | None) -> int:
    """A size field of an answer (Content-Length, a listing's Size): a whole number
    of bytes, not below zero, or the answer is one stepstone cannot read."""
    value = answered(answer, name, location=location, key=key)
    try:
        size = int(value)
    except (TypeError, ValueError):
        size = -1
    if size < 0 or isinstance(value, bool):
        raise StoreError(
            f"the store's answer holds a {name} that is no size: {str(value)[:40]!r}",
            location=location,
            key=key,
        )
    return size


def object_info(answer: Any, key: str, size: str, *, location: str) -> ObjectInfo:
    """What a HEAD (its size in ``ContentLength``) or a listing's entry (in
    ``Size``) says of one object, each field checked as :func:`answered` does."""
    modified = answered(answer, "LastModified", location=location, key=key)
    if not isinstance(modified, datetime):
        raise StoreError(
            "the store's answer holds a LastModified that is no time", location=location, key=key
        )
    etag = quoted(str(answered(answer, "ETag", location=location, key=key)))
    length = answered_size(answer, size, location=location, key=key)
    return ObjectInfo(key, etag, length, modified.timestamp())


@dataclass(frozen=True, slots=True)
class Looked:
    """What a HEAD says of one object, beyond its info: the write token and
    the husk mark in its metadata (stepstone.store.s3.husks), and
    its age by the server's clock (its ``Date`` less its ``Last-Modified``;
    0 when the answer has no ``Date``)."""

    info: ObjectInfo
    token: str
    husk: bool
    age: float


def looked_at(answer: Any, key: str, *, location: str) -> Looked:
    """A HEAD's answer as :class:`Looked`."""
    info = object_info(answer, key, "ContentLength", location=location)
    metadata = answer.get("Metadata") or {}
    headers = (answer.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}
    age = 0.0
    with contextlib.suppress(KeyError, TypeError, ValueError):
        age = max(0.0, parsedate_to_datetime(headers["date"]).timestamp() - info.modified)
    return Looked(info, str(metadata.get(WRITE_META, "")), HUSK_META in metadata, age)


def error_answer(exc: BaseException | None) -> tuple[str, int] | None:
    """The error code and HTTP status of an S3 error answer (None: no answer)."""
    from botocore.exceptions import ClientError

    if not isinstance(exc, ClientError):
        return None
    code = str(exc.response.get("Error", {}).get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
    return code, status


def throttling(exc: BaseException) -> bool:
    """Did S3 ask us to send less (SlowDown, a throttling code, 429)?"""
    answer = error_answer(exc)
    return answer is not None and (answer[0] in THROTTLING_CODES or answer[1] == 429)


def maybe_applied(exc: BaseException) -> bool:
    """Could the failed try (``exc``, a StoreError raised from botocore's)
    have reached S3 and been applied?

    A refused connection never sent the request, and throttling (SlowDown,
    429) or a conditional-write conflict (409) is refused before any work;
    a timeout while reading the answer, a dropped connection or another
    5xx might have been applied.
    """
    from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError

    cause = exc.__cause__
    if isinstance(cause, (EndpointConnectionError, ConnectTimeoutError)):
        return False
    answer = error_answer(cause)
    if answer is not None:
        code, status = answer
        return code not in REFUSED_CODES and status not in (409, 429)
    return True
