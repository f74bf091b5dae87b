"""Callbacks: a run makes a callback, hands out its id, and waits for it
holding no worker; a completion from any process (``runner.complete_callback``)
resumes it with the value, typed; the first completion wins; a completion
not of the callback's type, or too large, fails the wait naming the
callback; the timeout raises CallbackTimeout, which the run can catch; the
id is the same on every replay. (Completions through a presigned URL, on
S3: test_callback_urls.py.)

Time is a FakeClock. Each scenario runs on the MemoryQueue, and on the
StoreQueue over memory, a real directory and moto's S3.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from talk_jobs import TALK_JOBS, AwaitsCallback, SyncTalker, Tokens, TwoCallbacks
from wf_jobs import Counters
from wf_support import ON_EVERY_STORE

from stepstone import (
    CallbackRefused,
    CallbackTimeout,
    EncodingError,
    FailureKind,
    JobRunner,
    JobStatus,
)
from stepstone.records.callbacks import MAX_BODY, CallbackId
from stepstone.runtime import FakeClock
from stepstone.testing import advance, run_job, wait_until

pytestmark = ON_EVERY_STORE

DONE = 20.0


@pytest.fixture
def make_talker(make_runner: Callable[..., JobRunner]) -> Callable[..., JobRunner]:
    def make(**kwargs: Any) -> JobRunner:
        kwargs.setdefault("jobs", TALK_JOBS)
        kwargs.setdefault("concurrency", 1)
        return make_runner(**kwargs)

    return make


async def waiting(runner: JobRunner, run_id: str) -> bool:
    state = await runner.status(run_id)
    return state is not None and state.status is JobStatus.WAITING_FOR_CALLBACK


async def acked(runner: JobRunner, run_id: str) -> bool:
    return await runner.queue.get(run_id) is None


async def made(runner: JobRunner, counters: Counters, job: AwaitsCallback) -> tuple[str, str]:
    """Submit ``job``, wait until it waits for its callback; its run id and the callback's id."""
    handle = await runner.submit(job)
    await wait_until(lambda: waiting(runner, handle.id), message="the run waits for its callback")
    (callback_id,) = {sent[2] for sent in counters.sent if sent[0] == job.order}
    return handle.id, callback_id


async def test_a_completion_from_a_process_with_no_worker_resumes_the_run_typed(
    make_talker: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_talker() as runner:
        run_id, callback_id = await made(runner, counters, AwaitsCallback(order="a"))
        state = await runner.status(run_id)
        assert state is not None and state.waiting_for == "approval"
        # concurrency=1: this runs only because the waiting run gave its slot back
        assert await run_job(runner, Tokens(key="meanwhile", count=1)) == 1
        api = make_talker()  # an API process: no worker runs there
        assert await api.complete_callback(callback_id, {"approved": True, "by": "ada"}) is True
        assert await runner.handle(run_id, AwaitsCallback).result(timeout=DONE) == (
            "approved by ada"
        )
    parsed = CallbackId.parse(callback_id)
    assert parsed.run_id == run_id and parsed.token == "00000001"


async def test_the_first_completion_wins_and_later_ones_are_refused_or_ignored(
    make_talker: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_talker() as runner:
        run_id, callback_id = await made(runner, counters, AwaitsCallback(order="b"))
    # No worker runs now: both completions come before the run can take one.
    api = make_talker()
    first = {"approved": True, "by": "first"}
    assert await api.complete_callback(callback_id, first) is True
    assert await api.complete_callback(callback_id, {"approved": False, "by": "x"}) is False
    async with make_talker() as runner:
        assert await runner.handle(run_id, AwaitsCallback).result(timeout=DONE) == (
            "approved by first"
        )
        with pytest.raises(CallbackRefused, match="has finished"):
            await runner.complete_callback(callback_id, first)


async def test_a_completion_not_of_its_type_fails_the_wait_naming_the_callback(
    make_talker: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_talker() as runner:
        caught_id, caught_cb = await made(runner, counters, AwaitsCallback(order="c"))
        await runner.complete_callback(caught_cb, {"approved": "perhaps"})
        said = await runner.handle(caught_id, AwaitsCallback).result(timeout=DONE)
        assert said.startswith("BadCallback: ") and "'approval'" in said and caught_cb in said
        assert "approved: Input should be a valid boolean" in said and "by: Field required" in said

        run_id, callback_id = await made(runner, counters, AwaitsCallback(order="d", catch=False))
        await runner.complete_callback(callback_id, [1, 2])
        outcome = await runner.handle(run_id, AwaitsCallback).join(timeout=DONE)
    assert outcome.error is not None
    assert outcome.error.reason == FailureKind.PERMANENT and outcome.attempts == 1
    assert outcome.error.error_type is not None and "BadCallback" in outcome.error.error_type
    assert callback_id in outcome.error.message


async def test_a_value_over_the_limit_is_refused_and_a_body_over_it_fails_the_wait(
    make_talker: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_talker() as runner:
        run_id, callback_id = await made(runner, counters, AwaitsCallback(order="e"))
        with pytest.raises(CallbackRefused, match=f"over the {MAX_BODY}"):
            await runner.complete_callback(callback_id, "x" * MAX_BODY)
        with pytest.raises(EncodingError):
            await runner.complete_callback(callback_id, object())
        # A body put there by other means (a presigned URL takes any size).
        callback = CallbackId.parse(callback_id)
        await runner.store.put(callback.completion(runner.layout), b"[" + b"0," * MAX_BODY + b"0]")
        await runner.queue.wake(run_id, JobStatus.WAITING_FOR_CALLBACK)  # (as the watch does)
        said = await runner.handle(run_id, AwaitsCallback).result(timeout=DONE)
    assert said.startswith("BadCallback: ") and f"over the {MAX_BODY}" in said


async def test_the_timeout_raises_callback_timeout_the_run_can_catch(
    make_talker: Callable[..., JobRunner], counters: Counters, clock: FakeClock
) -> None:
    async with make_talker() as runner:
        run_id, callback_id = await made(runner, counters, AwaitsCallback(order="f", timeout=600))
        await advance(clock, 599)
        assert await waiting(runner, run_id)
        await advance(clock, 2)
        said = await runner.handle(run_id, AwaitsCallback).result(timeout=DONE)
        assert said.startswith("CallbackTimeout: ") and callback_id in said
        with pytest.raises(CallbackRefused):
            await runner.complete_callback(callback_id, {"approved": True, "by": "late"})
        # Uncaught, it fails the run for good, naming the callback.
        late_id, late_cb = await made(
            runner, counters, AwaitsCallback(order="g", timeout=60, catch=False)
        )
        await advance(clock, 61)
        with pytest.raises(CallbackRefused, match=r"expired|has finished"):
            await runner.complete_callback(late_cb, {"approved": True, "by": "late"})
        outcome = await runner.handle(late_id, AwaitsCallback).join(timeout=DONE)
    assert outcome.error is not None and outcome.error.reason == FailureKind.PERMANENT
    assert CallbackTimeout.__name__ in (outcome.error.error_type or "")


async def test_ids_that_name_no_open_callback_are_refused(
    make_talker: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_talker() as runner:
        run_id, callback_id = await made(runner, counters, AwaitsCallback(order="h"))
        parsed = CallbackId.parse(callback_id)
        for bad in ("", "nonsense", callback_id + "/x", 42):
            with pytest.raises(CallbackRefused, match="not a callback id"):
                await runner.complete_callback(bad, 1)  # type: ignore[arg-type]
        elsewhere = str(CallbackId(parsed.run_id, parsed.incarnation, "00000009"))
        with pytest.raises(CallbackRefused, match="no callback there"):
            await runner.complete_callback(elsewhere, 1)
        step_place = str(CallbackId(parsed.run_id, parsed.incarnation, "00000002"))
        with pytest.raises(CallbackRefused, match="names no callback"):
            await runner.complete_callback(step_place, 1)
        earlier = str(CallbackId(parsed.run_id, "0" * 16, parsed.token))
        with pytest.raises(CallbackRefused, match="earlier run"):
            await runner.complete_callback(earlier, 1)
        unknown = str(CallbackId("0" * 32, parsed.incarnation, parsed.token))
        with pytest.raises(CallbackRefused, match="no live run"):
            await runner.complete_callback(unknown, 1)
        assert await waiting(runner, run_id), "a refused completion woke or ended the run"


async def test_a_callback_has_the_same_id_on_every_replay(
    make_talker: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_talker() as runner:
        job = AwaitsCallback(order="i", fail_once=True)
        run_id, callback_id = await made(runner, counters, job)
        handed = [(attempt, cid, url) for who, attempt, cid, url in counters.sent if who == "i"]
        assert [attempt for attempt, _, _ in handed] == [1, 2]
        assert len({(cid, url) for _, cid, url in handed}) == 1, handed
        await runner.complete_callback(callback_id, {"approved": False, "by": "bo"})
        assert await runner.handle(run_id, AwaitsCallback).result(timeout=DONE) == "refused by bo"

        # Made by two concurrent branches: each its own id, the same on the retry.
        handle = await runner.submit(TwoCallbacks(order="j"))
        await wait_until(lambda: waiting(runner, handle.id), message="both callbacks made")
        ids: dict[str, set[str]] = {}
        for who, _, cid, _ in counters.sent:
            if who.startswith("j:"):
                ids.setdefault(who, set()).add(cid)
        assert len(ids["j:left"]) == len(ids["j:right"]) == 1 and ids["j:left"] != ids["j:right"]
        (left,), (right,) = ids["j:left"], ids["j:right"]
        assert await runner.complete_callback(right, "R") is True
        assert await runner.complete_callback(left, "L") is True
        assert await handle.result(timeout=DONE) == ["L", "R"]


async def test_a_replay_from_a_later_step_keeps_what_the_wait_took(
    make_talker: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_talker() as runner:
        run_id, callback_id = await made(runner, counters, AwaitsCallback(order="k"))
        await runner.complete_callback(callback_id, {"approved": True, "by": "kay"})
        handle = runner.handle(run_id, AwaitsCallback)
        assert await handle.result(timeout=DONE) == "approved by kay"
        await wait_until(lambda: acked(runner, run_id), message="the run leaves the queue")
        await runner.replay(run_id, from_step="after")
        assert await handle.result(timeout=DONE) == "approved by kay"
    assert counters.counts["after:approved by kay"] == 2, "the step after the wait ran again"


async def test_a_synchronous_job_streams_and_waits_for_a_callback_through_ctx_sync(
    make_talker: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_talker() as runner:
        handle = await runner.submit(SyncTalker(order="s"))
        await wait_until(lambda: waiting(runner, handle.id), message="the run waits")
        (callback_id,) = {sent[2] for sent in counters.sent if sent[0] == "s"}
        assert await runner.complete_callback(callback_id, {"ok": 1}) is True
        assert await handle.result(timeout=DONE) == {"ok": 1}
        assert [line async for line in handle.stream("lines")] == ["first", "second"]
