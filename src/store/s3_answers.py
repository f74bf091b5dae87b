"""S3's error codes, by what each asks of a client: send less, try again, fix
the configuration. The S3Store classifies every answer by these
(stepstone.store.s3), and the throttle and the retries act on the class."""

from __future__ import annotations

from .conflicts import CONFLICT_CODES

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
(stepstone.store.wrappers.throttle)."""
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
