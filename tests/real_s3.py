"""A real S3 server for the tests, named by one setting: ``STEPSTONE_TEST_S3_URL``.

    STEPSTONE_TEST_S3_URL=http://ACCESS:SECRET@127.0.0.1:7480          # tools/rgw.py's
    STEPSTONE_TEST_S3_URL=https://s3.eu-west-1.amazonaws.com/my-bucket?region=eu-west-1

The endpoint; credentials, if any, in its user part (otherwise the usual AWS
sources); a bucket, if any, in its path (otherwise the tests make one); and
store URL parameters, if any, in its query, added to every store URL the
tests open there (``etag_quotes=bare``, ``header=...``). Each test works under
a prefix of its own and removes what it wrote.

Without the setting the tests that need it skip, saying so; with ``CI`` set
they fail instead, since CI starts a Ceph RADOS Gateway (tools/rgw.py).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

SETTING = "STEPSTONE_TEST_S3_URL"
PROFILE = "stepstone-test"


@dataclass(frozen=True)
class RealS3:
    """The server the setting names."""

    endpoint: str
    bucket: str
    query: dict[str, str]
    """What every store URL there carries: region, profile, the setting's own."""

    def client(self) -> Any:
        """A boto3 client on the server, for setting up and inspecting."""
        import boto3

        session = boto3.Session(profile_name=self.query.get("profile"))
        return session.client(
            "s3", endpoint_url=self.endpoint, region_name=self.query.get("region", "us-east-1")
        )

    def url(self, prefix: str, **more: str) -> str:
        """A store URL for ``prefix`` in the bucket, with ``more`` parameters."""
        query = urlencode({"endpoint_url": self.endpoint, **self.query, **more})
        return f"s3://{self.bucket}/{prefix}?{query}"

    def remove(self, prefix: str) -> None:
        """Delete every object under ``prefix`` (a test's leftovers)."""
        client = self.client()
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix + "/"
        )
        for page in pages:
            keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys, "Quiet": True})


def missing(reason: str) -> str:
    """Why the real-S3 tests cannot run, and what to do."""
    return (
        f"{reason}: these tests run on a real S3 server named by {SETTING} "
        "(python tools/rgw.py start prints one; docs/testing.md)"
    )


def real_s3_from_setting(scratch: Path) -> RealS3 | None:
    """The server the setting names (None when unset), credentials written
    to a profile of a shared-credentials file in ``scratch`` (which this
    process and its children then read: AWS_SHARED_CREDENTIALS_FILE), and a
    bucket made when the setting names none."""
    raw = os.environ.get(SETTING, "").strip()
    if not raw:
        return None
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{SETTING}={raw!r} is no http(s) URL")
    port = f":{parts.port}" if parts.port else ""
    endpoint = f"{parts.scheme}://{parts.hostname}{port}"
    query = dict(parse_qsl(parts.query))
    query.setdefault("region", "us-east-1")
    if parts.username:
        credentials = scratch / "credentials"
        credentials.write_text(
            f"[{PROFILE}]\naws_access_key_id = {unquote(parts.username)}\n"
            f"aws_secret_access_key = {unquote(parts.password or '')}\n"
        )
        os.environ["AWS_SHARED_CREDENTIALS_FILE"] = str(credentials)
        query.setdefault("profile", PROFILE)
    bucket = parts.path.strip("/")
    server = RealS3(endpoint, bucket or f"stepstone-tests-{uuid.uuid4().hex[:12]}", query)
    if not bucket:
        server.client().create_bucket(Bucket=server.bucket)
    return server
