"""S3's 409 ConditionalRequestConflict is a race to decide, not an outage.

Through a proxy in front of moto that answers conditional PUTs with 409, in
bursts on one key as contention on AWS gives them: the write waits the burst
out under a budget of its own (the quick retries of a blip would give up),
and a conflict whose rival landed is the lost race it is (AlreadyExists,
PreconditionFailed), decided by one HEAD, never success and never an outage.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from conflict_proxy import ConflictProxy

from stepstone.store import (
    AlreadyExists,
    PreconditionFailed,
    RetryPolicy,
    StoreConfigError,
    StoreUnavailable,
    open_store,
)
from stepstone.store.s3 import S3Store

QUICK = RetryPolicy(attempts=5, base=0.001, cap=0.005)
QUICK_CONFLICTS = RetryPolicy(attempts=12, base=0.001, cap=0.01)


@pytest.fixture
async def proxy(moto_server: str) -> AsyncIterator[ConflictProxy]:
    p = ConflictProxy(moto_server)
    await p.start()
    yield p
    await p.stop()


@pytest.fixture
async def store(proxy: ConflictProxy, s3_bucket: str) -> AsyncIterator[S3Store]:
    s = S3Store(
        s3_bucket,
        "t",
        endpoint_url=proxy.url,
        region="us-east-1",
        retry=QUICK,
        conflicts=QUICK_CONFLICTS,
        adaptive=False,
    )
    yield s
    await s.close()


def one_burst(proxy: ConflictProxy) -> None:
    """The next conditional PUT starts a burst of six 409s on its key, and no
    other does. The burst ends by its count, not its clock: a window of a
    few seconds ran out before the sixth retry on a loaded machine."""

    def no_more(path: str) -> None:
        proxy.burst_chance = 0.0

    proxy.burst_chance, proxy.on_conflict, proxy.window = 1.0, no_more, 3600.0


async def test_a_burst_of_conflicts_on_a_create_is_waited_out(
    store: S3Store, proxy: ConflictProxy
) -> None:
    one_burst(proxy)
    etag = await store.put_if_absent("memo", b"mine")
    assert proxy.conflicts == 6 and proxy.count("PUT") == 7
    assert proxy.count("HEAD") >= 6  # each conflict re-read: nothing there yet, try again
    assert (await store.get("memo")).etag == etag


async def test_a_burst_of_conflicts_on_a_swap_is_waited_out(
    store: S3Store, proxy: ConflictProxy
) -> None:
    first = await store.put("lease", b"v1")
    one_burst(proxy)
    second = await store.put_if_match("lease", b"v2", first)
    assert proxy.conflicts == 6
    assert (await store.get("lease")).data == b"v2" and second != first


async def test_a_conflict_whose_rival_landed_is_a_lost_race(
    store: S3Store, proxy: ConflictProxy, s3_admin: Any, s3_bucket: str
) -> None:
    first = await store.put("lease", b"v1")

    def rival_lands(path: str) -> None:
        key = path.split("/", 2)[2]
        s3_admin.put_object(Bucket=s3_bucket, Key=key, Body=b"the rival's")

    proxy.scatter, proxy.on_conflict = 1.0, rival_lands
    with pytest.raises(AlreadyExists):
        await store.put_if_absent("memo", b"mine")
    with pytest.raises(PreconditionFailed):
        await store.put_if_match("lease", b"v2", first)
    assert proxy.count("PUT") == 3  # one each, decided by a HEAD: not tried again
    assert (await store.get("memo")).data == b"the rival's"


async def test_a_key_that_never_stops_conflicting_is_unavailable_in_bounded_time(
    store: S3Store, proxy: ConflictProxy
) -> None:
    proxy.scatter = 1.0
    with pytest.raises(StoreUnavailable) as caught:
        await store.put_if_absent("memo", b"mine")
    assert "still conflicted after 12 tries" in str(caught.value)
    assert proxy.count("PUT") == 12


@pytest.mark.parametrize("status", [501])
async def test_a_store_without_conditional_writes_is_a_config_error(
    moto_server: str, s3_bucket: str, status: int
) -> None:
    """What a store answers that does not implement If-None-Match/If-Match."""
    from aiohttp import web

    async def not_implemented(request: web.Request) -> web.Response:
        body = (
            "<Error><Code>NotImplemented</Code><Message>A header you provided implies "
            "functionality that is not implemented</Message></Error>"
        )
        return web.Response(status=status, body=body.encode(), content_type="application/xml")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", not_implemented)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    store = S3Store(s3_bucket, endpoint_url=url, region="us-east-1", retry=QUICK, adaptive=False)
    try:
        with pytest.raises(StoreConfigError) as caught:
            await store.put_if_absent("memo", b"mine")
        assert "does not support conditional writes" in str(caught.value)
        assert "stepstone check-store" in str(caught.value)
        with pytest.raises(StoreUnavailable):  # a plain write's 501 is the server's fault
            await store.put("memo", b"mine")
    finally:
        await store.close()
        await runner.cleanup()


async def test_a_providers_header_goes_with_every_request(
    proxy: ConflictProxy, s3_bucket: str
) -> None:
    """Tigris runs a conditional write on its leader only with X-Tigris-Consistent."""
    url = (
        f"s3://{s3_bucket}/t?endpoint_url={proxy.url}&region=us-east-1"
        "&header=X-Tigris-Consistent:true"
    )
    store = open_store(url)
    try:
        etag = await store.put_if_absent("k", b"1")
        await store.put_if_match("k", b"2", etag)
        await store.get("k")
        await store.list()
        await store.delete("k")
    finally:
        await store.close()
    assert len(proxy.headers) == 5
    assert all(h.get("X-Tigris-Consistent") == "true" for h in proxy.headers)


@pytest.mark.parametrize("bad", ["X-Tigris-Consistent", ":true", "X Bad:1"])
def test_a_malformed_header_parameter_is_refused(bad: str) -> None:
    with pytest.raises(StoreConfigError, match="header=Name:value"):
        open_store(f"s3://bucket/t?header={bad}")
