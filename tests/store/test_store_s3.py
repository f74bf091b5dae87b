"""S3Store beyond the shared contract: error classification, retries, lost answers.

Faults come from a real HTTP hop: a small aiohttp proxy in front of the moto
server that, request by request, forwards, answers with an S3 error instead,
forwards and then "loses" the answer (the write landed, the client sees a
500), or holds the answer past the client's read timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from stepstone.runtime.clock import FakeClock
from stepstone.store import (
    AlreadyExists,
    NotFound,
    PreconditionFailed,
    RetryPolicy,
    StoreConfigError,
    StoreUnavailable,
    Throttled,
    open_store,
)
from stepstone.store.s3 import S3Store
from stepstone.store.s3.dialect import Learned
from stepstone.store.s3.object_turns import ObjectTurns
from stepstone.store.s3.throttle import AdaptiveRates

FAST_RETRY = RetryPolicy(attempts=4, base=0.001, cap=0.005)

_DROP_REQUEST = {"host", "content-length", "transfer-encoding", "connection", "expect"}
_DROP_RESPONSE = {"content-length", "transfer-encoding", "connection", "content-encoding", "date"}


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class FaultProxy:
    """An HTTP proxy to moto that misbehaves on cue.

    ``plan`` holds one action per coming request (then requests are forwarded):
    ``("error", status, code)`` answers with an S3 error without forwarding;
    ``("lose", status, code)`` forwards (S3 applies it) and answers an error;
    ``("hold",)`` forwards and withholds the answer until ``release`` is set.
    """

    upstream: str
    plan: list[tuple[Any, ...]] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    url: str = ""

    def count(self, method: str | None = None) -> int:
        return sum(1 for s in self.seen if method is None or s.method == method)

    @staticmethod
    def error(status: int, code: str) -> web.Response:
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            f"<Error><Code>{code}</Code><Message>injected {code}</Message></Error>"
        )
        return web.Response(status=status, body=body.encode(), content_type="application/xml")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(Seen(request.method, request.path_qs, dict(request.headers)))
        action = self.plan.pop(0) if self.plan else ("forward",)
        if action[0] == "error":
            return self.error(action[1], action[2])
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP_REQUEST}
        async with self.session.request(
            request.method, self.upstream + request.path_qs, headers=headers, data=body
        ) as upstream:
            payload = await upstream.read()
            status = upstream.status
            out = {k: v for k, v in upstream.headers.items() if k.lower() not in _DROP_RESPONSE}
        if action[0] == "lose":
            return self.error(action[1], action[2])
        if action[0] == "hold":
            await asyncio.wait_for(self.release.wait(), timeout=30)
        if request.method == "HEAD" and "Content-Length" in upstream.headers:
            out["Content-Length"] = upstream.headers["Content-Length"]  # (no body to measure)
            return web.Response(status=status, headers=out)
        return web.Response(status=status, body=payload, headers=out)

    async def start(self) -> None:
        self.session = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, handle_signals=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        self.release.set()
        await self.runner.cleanup()
        await self.session.close()


@pytest.fixture
async def proxy(moto_server: str) -> AsyncIterator[FaultProxy]:
    p = FaultProxy(moto_server)
    await p.start()
    yield p
    await p.stop()


def through(
    proxy: FaultProxy,
    bucket: str,
    read_timeout: float = 30.0,
    adaptive: bool | AdaptiveRates = False,
) -> S3Store:
    """A store through the proxy. Its adaptive send rate is off unless given:
    after a throttling answer it would pace later tries in real seconds, and
    the tests below of it run it on a fake clock. It knows its provider
    holds every condition (as moto does): the requests it sends to learn
    that are the subject of tests of their own."""
    store = S3Store(
        bucket,
        "t",
        endpoint_url=proxy.url,
        region="us-east-1",
        retry=FAST_RETRY,
        read_timeout=read_timeout,
        adaptive=adaptive,
    )
    learned = store.learned
    learned.swaps_seen = learned.creates_seen = learned.conditional_delete = True
    return store


@pytest.fixture
async def faulty(proxy: FaultProxy, s3_bucket: str) -> AsyncIterator[S3Store]:
    store = through(proxy, s3_bucket)
    yield store
    await store.close()


@pytest.fixture
async def impatient(proxy: FaultProxy, s3_bucket: str) -> AsyncIterator[S3Store]:
    """Through the proxy with a short read timeout, for answers the proxy holds back."""
    store = through(proxy, s3_bucket, read_timeout=1.0)
    yield store
    await store.close()


# -- the wire ------------------------------------------------------------------------


async def test_conditional_writes_are_sent_as_s3_conditions(
    faulty: S3Store, proxy: FaultProxy
) -> None:
    etag = await faulty.put_if_absent("k", b"1")
    new = await faulty.put_if_match("k", b"2", etag)
    await faulty.delete("k", if_match=new)
    puts = [s for s in proxy.seen if s.method in ("PUT", "DELETE")]
    assert [s.method for s in puts] == ["PUT", "PUT", "DELETE"]
    assert puts[0].headers.get("If-None-Match") == "*"
    assert puts[1].headers.get("If-Match") == etag
    assert puts[2].headers.get("If-Match") == new
    assert all(s.path.startswith(f"/{faulty.bucket}/t/k") for s in puts)


async def test_keys_live_under_the_prefix(s3_store: Any, s3_admin: Any, s3_bucket: str) -> None:
    await s3_store.put("outcomes/r1", b"x")
    listed = s3_admin.list_objects_v2(Bucket=s3_bucket)["Contents"]
    assert [o["Key"] for o in listed] == ["t/outcomes/r1"]
    s3_admin.put_object(Bucket=s3_bucket, Key="elsewhere", Body=b"y")
    assert [i.key for i in await s3_store.list()] == ["outcomes/r1"]


async def test_etags_are_the_same_format_everywhere(s3_store: Any) -> None:
    etag = await s3_store.put("k", b"x")
    assert etag.startswith('"') and etag.endswith('"')
    assert (await s3_store.get("k")).etag == etag
    assert (await s3_store.head("k")).etag == etag
    assert [i.etag for i in await s3_store.list()] == [etag]


async def test_listing_follows_continuation_pages(s3_store: Any) -> None:
    keys = [f"p/{n:02d}" for n in range(7)]
    for k in keys:
        await s3_store.put(k, b"x")
    s3_store.max_page = 3  # as if S3 had answered 3 keys at a time instead of 1000
    assert [i.key for i in await s3_store.list(limit=100)] == keys
    assert [i.key for i in await s3_store.list(limit=5)] == keys[:5]
    assert [i.key for i in await s3_store.list(start_after="p/01", limit=100)] == keys[2:]


# -- configuration errors -------------------------------------------------------------------


async def test_a_missing_bucket_is_one_clear_config_error(moto_server: str) -> None:
    store = open_store(f"s3://no-such-bucket-here/x?endpoint_url={moto_server}&region=us-east-1")
    calls = [
        store.get("k"),
        store.head("k"),
        store.put("k", b"x"),
        store.put_if_absent("k", b"x"),
        store.put_if_match("k", b"x", '"e"'),
        store.delete("k"),
        store.delete("k", if_match='"e"'),
        store.list(),
    ]
    for call in calls:
        with pytest.raises(StoreConfigError) as caught:
            await call
        assert "bucket 'no-such-bucket-here' does not exist" in str(caught.value)
        assert "botocore" not in str(caught.value)
    await store.close()


@pytest.mark.parametrize(
    ("status", "code", "words"),
    [
        (403, "AccessDenied", "access denied to bucket"),
        (403, "InvalidAccessKeyId", "refused the credentials"),
        (403, "SignatureDoesNotMatch", "refused the credentials"),
        (403, "ExpiredToken", "refused the credentials"),
    ],
)
async def test_refusals_are_config_errors_and_not_retried(
    faulty: S3Store, proxy: FaultProxy, status: int, code: str, words: str
) -> None:
    proxy.plan = [("error", status, code)] * 10
    with pytest.raises(StoreConfigError) as caught:
        await faulty.put("k", b"x")
    assert words in str(caught.value)
    assert repr(faulty.bucket) in str(caught.value)
    assert proxy.count() == 1


async def test_an_unreachable_endpoint_fails_fast_after_bounded_retries(s3_bucket: str) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = S3Store(
        s3_bucket, endpoint_url=f"http://127.0.0.1:{port}", region="us-east-1", retry=FAST_RETRY
    )
    async with asyncio.timeout(60):  # (bounded: it gives up, it does not hang)
        with pytest.raises(StoreUnavailable, match="gave up after 4 attempts"):
            await store.get("k")
    await store.close()


# -- transient failures ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code"),
    [(503, "SlowDown"), (500, "InternalError"), (503, "ServiceUnavailable"), (429, "Throttling")],
)
async def test_transient_errors_are_retried(
    faulty: S3Store, proxy: FaultProxy, status: int, code: str
) -> None:
    proxy.plan = [("error", status, code)] * 2
    etag = await faulty.put("k", b"x")
    assert proxy.count("PUT") == 3
    proxy.plan = [("error", status, code)] * 2
    got = await faulty.get("k")
    assert (got.data, got.etag) == (b"x", etag)
    assert proxy.count("GET") == 3


@pytest.mark.parametrize(
    ("status", "code", "throttled"),
    [(503, "SlowDown", True), (429, "TooManyRequests", True), (500, "InternalError", False)],
)
async def test_persistent_failure_becomes_unavailable_after_the_attempts(
    faulty: S3Store, proxy: FaultProxy, status: int, code: str, throttled: bool
) -> None:
    proxy.plan = [("error", status, code)] * 10
    with pytest.raises(StoreUnavailable, match="gave up after 4 attempts") as caught:
        await faulty.put("k", b"x")
    assert code in str(caught.value)
    # Asked to send less, told apart: an object many processes write waits longer.
    assert isinstance(caught.value, Throttled) == throttled
    assert proxy.count() == FAST_RETRY.attempts


async def test_a_412_is_an_answer_and_never_retried(faulty: S3Store, proxy: FaultProxy) -> None:
    stale = await faulty.put("k", b"1")
    await faulty.put("k", b"2")
    proxy.seen.clear()
    with pytest.raises(AlreadyExists):
        await faulty.put_if_absent("k", b"3")
    with pytest.raises(PreconditionFailed):
        await faulty.put_if_match("k", b"3", stale)
    with pytest.raises(PreconditionFailed):
        await faulty.delete("k", if_match=stale)
    assert proxy.count() == 3


async def test_a_held_answer_times_out_and_is_retried(
    impatient: S3Store, proxy: FaultProxy
) -> None:
    await impatient.put("k", b"x")
    proxy.plan = [("hold",)]
    assert (await impatient.get("k")).data == b"x"
    assert proxy.count("GET") >= 2  # the held one, then at least one retry


# -- the adaptive send rate -------------------------------------------------------------------


def test_the_adaptive_send_rates_are_on_by_default_one_set_a_process_and_bucket() -> None:
    assert isinstance(S3Store("b").send_rates, AdaptiveRates)
    assert S3Store("b").send_rates is S3Store("b", "other-prefix").send_rates
    assert S3Store("b").send_rates is not S3Store("c").send_rates
    assert S3Store("b").send_rates is not S3Store("b", endpoint_url="http://x").send_rates
    assert S3Store("b", adaptive=False).send_rates is None
    shared = AdaptiveRates()
    assert (
        S3Store("b", "one", adaptive=shared).send_rates
        is S3Store("b", "two", adaptive=shared).send_rates
    )


@pytest.mark.parametrize(("status", "code"), [(503, "SlowDown"), (429, "TooManyRequests")])
async def test_throttling_answers_slow_the_store_down_and_every_request_completes(
    proxy: FaultProxy, s3_bucket: str, status: int, code: str
) -> None:
    clock = FakeClock()
    slept: list[float] = []

    async def sleep(seconds: float) -> None:  # the wait for a token, on the fake clock
        slept.append(seconds)
        clock.advance(seconds)

    rates = AdaptiveRates(clock=clock.now, sleep=sleep)
    store = through(proxy, s3_bucket, adaptive=rates)
    try:
        for n in range(150):  # a hundred answers a second, none of them throttling
            clock.advance(0.01)
            await store.put(f"p/k{n}", b"x")
        rate = rates.of("p/", under="t")
        assert (rate.rate, slept) == (None, [])  # never throttled: never waited
        before = rate.measured
        assert before == pytest.approx(100, rel=0.1)

        proxy.plan = [("error", status, code)] * (FAST_RETRY.attempts - 1)
        await store.put("p/after", b"x")  # refused four times in a row, then it lands
        assert proxy.count("PUT") == 150 + FAST_RETRY.attempts
        assert rate.throttles == FAST_RETRY.attempts - 1
        allowed = rate.rate  # what the partition let through: this process's share
        assert allowed is not None and allowed == pytest.approx(before, rel=0.1)

        # Twenty writes at once now leave one every 1/rate seconds, and every
        # one gets its answer.
        start = clock.now()
        proxy.plan = [("error", status, code)] * 2  # two of them refused once more
        await asyncio.gather(*(store.put(f"p/n{n}", b"y") for n in range(20)))
        assert [(await store.get(f"p/n{n}")).data for n in range(20)] == [b"y"] * 20
        assert clock.now() - start > 15 / allowed
        assert rates.of("p/", under="t", reads=True).rate is None  # the reads were never refused
        assert sorted(rates.by_partition) == ["t/p reads", "t/p writes"]
    finally:
        await store.close()


async def test_other_transient_errors_do_not_slow_the_store_down(
    proxy: FaultProxy, s3_bucket: str
) -> None:
    rates = AdaptiveRates()
    store = through(proxy, s3_bucket, adaptive=rates)
    try:
        proxy.plan = [("error", 500, "InternalError"), ("error", 503, "ServiceUnavailable")]
        await store.put("k", b"x")
        assert (rates.of("k").rate, rates.of("k").throttles) == (None, 0)
    finally:
        await store.close()


async def test_a_hot_objects_swap_that_waited_its_turn_checks_its_etag_before_it_is_sent(
    proxy: FaultProxy, s3_bucket: str
) -> None:
    """A provider that limits the writes to one object counts one refused
    as stale too: a swap that waited for its turn reads the etag first
    (stepstone.store.s3.conflicts.confirm_precondition)."""
    clock = FakeClock()

    async def sleep(seconds: float) -> None:
        clock.advance(seconds)

    rates = AdaptiveRates(clock=clock.now, sleep=sleep)
    ours, theirs = through(proxy, s3_bucket, adaptive=rates), through(proxy, s3_bucket)
    try:
        etag = await ours.put("slots/k", b"0")
        turns = rates.hot.rates["t/slots/k"] = ObjectTurns(clock=clock.now, sleep=sleep)
        turns.record(sent=clock.now(), refused=False)  # our next turn is a second away
        await theirs.put_if_match("slots/k", b"theirs", etag)
        puts = proxy.count("PUT")
        with pytest.raises(PreconditionFailed):
            await ours.put_if_match("slots/k", b"ours", etag)  # its turn came after theirs
        assert (proxy.count("PUT"), proxy.count("HEAD")) == (puts, 1)  # not sent: one HEAD
        fresh = (await ours.get("slots/k")).etag
        await ours.put_if_match("slots/k", b"ours", fresh)  # the turn given back: at once
        assert (proxy.count("PUT"), proxy.count("HEAD")) == (puts + 1, 1)
        assert turns.throttles == 0
        with pytest.raises(AlreadyExists):
            await ours.put_if_absent("slots/k", b"again")  # waited: found there by a HEAD
        assert (proxy.count("PUT"), proxy.count("HEAD")) == (puts + 1, 2)
    finally:
        await ours.close()
        await theirs.close()


# -- lost answers: the write landed, the client saw an error --------------------------------


async def test_put_if_absent_whose_answer_was_lost_reports_success(
    faulty: S3Store, proxy: FaultProxy
) -> None:
    proxy.plan = [("lose", 500, "InternalError")]
    etag = await faulty.put_if_absent("outcomes/r1", b"ours")
    got = await faulty.get("outcomes/r1")
    assert (got.data, got.etag) == (b"ours", etag)
    # PUT (landed, answer lost), PUT (412: it's there), HEAD (its token is ours), GET (above)
    assert [s.method for s in proxy.seen] == ["PUT", "PUT", "HEAD", "GET"]


async def test_put_if_absent_after_a_timeout_that_landed_reports_success(
    impatient: S3Store, proxy: FaultProxy
) -> None:
    proxy.plan = [("hold",)]
    etag = await impatient.put_if_absent("outcomes/r1", b"ours")
    assert (await impatient.get("outcomes/r1")).etag == etag
    assert proxy.count("PUT") >= 2


async def test_put_if_absent_after_a_lost_answer_still_loses_to_another_writer(
    faulty: S3Store, proxy: FaultProxy, s3_admin: Any
) -> None:
    s3_admin.put_object(Bucket=faulty.bucket, Key="t/outcomes/r1", Body=b"theirs")
    proxy.plan = [("error", 500, "InternalError")]
    with pytest.raises(AlreadyExists):
        await faulty.put_if_absent("outcomes/r1", b"ours")
    assert (await faulty.get("outcomes/r1")).data == b"theirs"


async def test_equal_bytes_without_an_ambiguous_try_still_already_exist(
    faulty: S3Store, proxy: FaultProxy, s3_admin: Any
) -> None:
    # Only a retry after an answer that may have been applied reads the object
    # back; a first-try 412 is reported as it is, even if the bytes are equal.
    s3_admin.put_object(Bucket=faulty.bucket, Key="t/k", Body=b"same")
    with pytest.raises(AlreadyExists):
        await faulty.put_if_absent("k", b"same")
    assert [s.method for s in proxy.seen] == ["PUT"]


async def test_throttling_is_not_taken_for_a_landed_write(
    faulty: S3Store, proxy: FaultProxy, s3_admin: Any
) -> None:
    # SlowDown is refused before any work, so a 412 after it is another
    # writer's, even one that wrote the same bytes: no read-back, no claim.
    s3_admin.put_object(Bucket=faulty.bucket, Key="t/k", Body=b"same")
    proxy.plan = [("error", 503, "SlowDown")]
    with pytest.raises(AlreadyExists):
        await faulty.put_if_absent("k", b"same")
    assert [s.method for s in proxy.seen] == ["PUT", "PUT"]


async def test_put_if_match_whose_answer_was_lost_reports_success(
    faulty: S3Store, proxy: FaultProxy
) -> None:
    etag = await faulty.put("lease", b"v1")
    proxy.plan = [("lose", 503, "ServiceUnavailable")]
    new = await faulty.put_if_match("lease", b"v2", etag)
    got = await faulty.get("lease")
    assert (got.data, got.etag) == (b"v2", new)


async def test_delete_if_match_whose_answer_was_lost_reports_success(
    faulty: S3Store, proxy: FaultProxy
) -> None:
    etag = await faulty.put("lease", b"v1")
    proxy.plan = [("lose", 500, "InternalError")]
    await faulty.delete("lease", if_match=etag)
    with pytest.raises(NotFound):
        await faulty.head("lease")


# -- event loops -------------------------------------------------------------------------------


def test_one_store_across_sequential_event_loops(s3_url: str) -> None:
    store = open_store(s3_url)

    async def write(n: int) -> bytes:
        await store.put("k", b"%d" % n)
        return (await store.get("k")).data

    assert asyncio.run(write(1)) == b"1"
    assert asyncio.run(write(2)) == b"2"  # a new loop: a new client, not the dead one
    asyncio.run(store.close())


async def test_concurrent_first_calls_share_one_client(s3_store: Any) -> None:
    await asyncio.gather(*(s3_store.put(f"k{n}", b"x") for n in range(10)))
    assert len(s3_store._clients) == 1


async def test_an_unknown_profile_is_a_config_error_naming_the_bucket(moto_server: str) -> None:
    store = open_store(f"s3://some-bucket?endpoint_url={moto_server}&profile=no-such-profile-x")
    with pytest.raises(StoreConfigError, match="some-bucket") as caught:
        await store.get("k")
    assert "no-such-profile-x" in str(caught.value)
    await store.close()


async def test_a_runner_opens_its_s3_client_as_it_starts(moto_server: str, s3_bucket: str) -> None:
    """So an API process's first submit pays no client setup, and a store
    that cannot make one says so at the start, not at the first request."""
    from stepstone import JobRunner

    api = JobRunner(f"s3://{s3_bucket}/app?endpoint_url={moto_server}", jobs=[])
    await api.open()
    assert isinstance(api.store, S3Store) and len(api.store._clients) == 1
    await api.close()
    url = f"s3://some-bucket?endpoint_url={moto_server}&profile=no-such-profile-x"
    for begin in ("open", "start"):
        runner = JobRunner(url, jobs=[])
        with pytest.raises(StoreConfigError, match="no-such-profile-x"):
            await getattr(runner, begin)()
        await runner.close()


# -- the provider's way with conditions (stepstone.store.s3.dialect) ---------------------------


def learning(proxy: FaultProxy, bucket: str) -> S3Store:
    """A store through the proxy that knows nothing yet of its provider."""
    store = through(proxy, bucket)
    store.learned = Learned()
    return store


REFUSED = ("error", 412, "PreconditionFailed")
FORWARD = ("forward",)


async def test_a_provider_refusing_swaps_on_the_current_etag_is_refused_after_three(
    proxy: FaultProxy, s3_bucket: str
) -> None:
    """Each refusal is checked with a HEAD while no swap has landed: the etag
    is still the one sent, in one form and then the other, so the store
    stops with one error instead of a caller re-reading and retrying for
    ever (the runner stops on it)."""
    store = learning(proxy, s3_bucket)
    try:
        etag = await store.put("k", b"1")
        proxy.plan = [REFUSED, FORWARD] * 3
        with pytest.raises(StoreConfigError) as caught:
            await store.put_if_match("k", b"2", etag)
        message = str(caught.value)
        assert "refused 3 conditional writes whose condition held" in message
        assert "Both forms of the etag" in message and "stepstone check-store" in message
        puts = [s for s in proxy.seen if s.method == "PUT"][1:]
        assert [s.headers["If-Match"] for s in puts] == [etag, etag.strip('"'), etag]
        with pytest.raises(StoreConfigError):  # and every conditional write after it
            await store.put_if_absent("other", b"x")
        assert (await store.get("k")).data == b"1"
    finally:
        await store.close()


async def test_a_swap_refused_for_its_etags_form_lands_in_the_other_form(
    proxy: FaultProxy, s3_bucket: str
) -> None:
    store = learning(proxy, s3_bucket)
    try:
        etag = await store.put("k", b"1")
        proxy.plan = [REFUSED]  # (as Ceph RGW 16 answers a quoted etag)
        new = await store.put_if_match("k", b"2", etag)
        assert (await store.get("k")).etag == new
        assert (store.learned.form, store.learned.swaps_seen) == ("bare", True)
        proxy.seen.clear()
        with pytest.raises(PreconditionFailed):  # a lost race from now on costs no HEAD
            await store.put_if_match("k", b"3", etag)
        assert [s.method for s in proxy.seen] == ["PUT"]
        assert proxy.seen[0].headers["If-Match"] == etag.strip('"')
    finally:
        await store.close()


async def test_a_provider_refusing_creates_on_missing_keys_is_refused_after_three(
    proxy: FaultProxy, s3_bucket: str
) -> None:
    store = learning(proxy, s3_bucket)
    store.conditional_delete = True
    try:
        await store.put("seen", b"the bucket")  # (a HEAD's 404 is then the key's)
        proxy.plan = [REFUSED, FORWARD] * 3
        with pytest.raises(StoreConfigError, match="a create on a key that does not exist"):
            await store.put_if_absent("k", b"1")
    finally:
        await store.close()


async def test_a_swap_on_a_missing_key_refused_412_is_not_found_until_a_swap_lands(
    proxy: FaultProxy, s3_bucket: str
) -> None:
    """Ceph RGW answers If-Match on a missing key 412, AWS 404: the contract
    takes either; while it looks anyway the store says NotFound."""
    store = learning(proxy, s3_bucket)
    try:
        proxy.plan = [REFUSED]
        with pytest.raises(NotFound):
            await store.put_if_match("k", b"1", '"0123456789abcdef0123456789abcdef"')
    finally:
        await store.close()


async def test_what_moto_holds_is_tried_once_and_told(s3_url: str) -> None:
    from stepstone.store import open_store

    store = open_store(s3_url)
    assert isinstance(store, S3Store)
    store.learned = Learned()
    try:
        etag = await store.put("k", b"1")
        await store.put_if_match("k", b"2", etag)
        notes = await store.provider_notes()
        assert store.learned.conditional_delete is True
        assert store.learned.multipart_conditions is False  # (If-Match on completion ignored)
        assert notes[0] == "If-Match takes the etag in quotes, as AWS documents"
        assert "DeleteObject holds If-Match" in notes[1]
        assert [i.key async for i in store.scan()] == ["k"]  # the probes left nothing
    finally:
        await store.close()


async def test_a_create_whose_every_try_failed_after_it_landed_is_decided_by_its_token(
    faulty: S3Store, proxy: FaultProxy
) -> None:
    """Its first try landed and lost its answer; the others failed before
    reaching S3: one HEAD reads the write token, and it is ours."""
    proxy.plan = [("lose", 500, "InternalError")] + [("error", 503, "ServiceUnavailable")] * 3
    etag = await faulty.put_if_absent("outcomes/r1", b"ours")
    assert (await faulty.head("outcomes/r1")).etag == etag
    assert [s.method for s in proxy.seen] == ["PUT"] * 4 + ["HEAD"] * 2


async def test_a_swap_whose_every_try_failed_lost_to_another_writer_says_so(
    faulty: S3Store, proxy: FaultProxy, s3_admin: Any
) -> None:
    """Equal bytes decide nothing: another writer's object holding the same
    bytes is theirs, by its token, and ours did not land."""
    etag = await faulty.put("lease", b"v1")
    s3_admin.put_object(Bucket=faulty.bucket, Key="t/lease", Body=b"v2")  # theirs, same bytes
    proxy.plan = [("error", 500, "InternalError")] * 4
    with pytest.raises(PreconditionFailed, match="another write landed"):
        await faulty.put_if_match("lease", b"v2", etag)


async def test_a_write_whose_every_try_failed_and_that_did_not_land_stays_unavailable(
    faulty: S3Store, proxy: FaultProxy
) -> None:
    proxy.plan = [("error", 500, "InternalError")] * 4
    with pytest.raises(StoreUnavailable):
        await faulty.put_if_absent("outcomes/r2", b"ours")
