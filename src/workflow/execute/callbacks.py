"""Callbacks: a run waits for an outside system to call it back.

``cb = await ctx.callback(name, timeout=..., type=T)`` records a callback in
the run, a call of its history (``callback``) whose memo keeps when it
expires, and gives its :class:`Callback`: an ``id`` that completes it through
``runner.complete_callback`` from any process (and ``stepstone callback
complete``, the web view), and, on a store that presigns PUTs (S3), a
``url`` through which whoever holds it completes it with a plain HTTP PUT of
a JSON body, needing no credentials and no server of ours, until the
callback's timeout (seven days at most: what a presigned URL lives). Both
are recorded with the callback, so a replay, which makes the call at the
same place, hands out the same id and the same URL.

``value = await cb`` waits: it suspends the run, holding no worker, until a
completion stands (:mod:`stepstone.records.callbacks`: one object per
callback) or the timeout passes; then it records what it took, once (first
writer wins), so every replay decides alike, and deletes the completion
(kept in that record). The value is the body as JSON, validated as ``T``:

- a body that is not JSON, is not of ``T``, or is over
  :data:`~stepstone.records.callbacks.MAX_BODY` raises BadCallback, naming
  the callback (uncaught, the run fails for good: every replay takes it too);
- a timeout passed first raises CallbackTimeout, which the job may catch.

A completion through the runner wakes the run at once (the queue's
:class:`~stepstone.runtime.capabilities.Waking`); one PUT through the URL
is found by the workers' look for completions
(:mod:`stepstone.submit.callback_watch`), or at the latest when the run
looks again on its own (``wait_recheck``) or at its timeout.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Generator
from typing import Any, Generic, TypeVar

from pydantic import TypeAdapter, ValidationError

from stepstone.errors import BadCallback, CallbackTimeout, CorruptMemo, PayloadUnreadable
from stepstone.execute.durable_waits import reason_of, wake_time
from stepstone.execute.memos import Memo
from stepstone.execute.scope import AttemptScope, log_extra
from stepstone.records.callbacks import MAX_BODY, CallbackId, Taken, expiry_of
from stepstone.records.calls import CALLBACK_TAKE_MEMO
from stepstone.records.codec import codec_for_type
from stepstone.records.payloads import ROOM, sealed, unreadable
from stepstone.runtime.status import JobStatus, Wait
from stepstone.runtime.suspension import Suspend
from stepstone.store import AlreadyExists, NotFound, PreconditionFailed
from stepstone.store.base import MAX_PRESIGNED_LIFETIME, PresignsPuts

T = TypeVar("T")

log = logging.getLogger("stepstone")

_ANY = codec_for_type(Any)


class Callback(Generic[T]):
    """A callback of the running run (``await ctx.callback(name, ...)``):
    hand out its :attr:`url` (or :attr:`id`), then ``await`` it for the value
    it is completed with. See :mod:`stepstone.execute.callbacks`."""

    def __init__(
        self,
        run: AttemptScope,
        name: str,
        callback_id: CallbackId,
        expires_at: float | None,
        url: str | None,
        output: Any,
    ) -> None:
        self._run = run
        self._id = callback_id
        self._output = output
        self._taken: Taken | None = None
        self.name = name
        """The name the run gave it."""
        self.id = str(callback_id)
        """Its id: ``runner.complete_callback(id, value)`` completes it, from
        any process. The same on every replay of the run."""
        self.expires_at = expires_at
        """When its timeout passes (epoch seconds; None: never)."""
        self.url = url
        """A URL that completes it with an HTTP PUT of a JSON body, needing no
        credentials (``curl -X PUT --data @body.json URL``), valid until its
        timeout and for seven days at most; None on a store that presigns
        nothing (memory, a directory). Whoever holds it can complete the
        callback: hand it only to who should."""

    def __repr__(self) -> str:
        return f"<Callback {self.name!r} {self.id}>"

    def __await__(self) -> Generator[Any, None, T]:
        return self.wait().__await__()

    async def wait(self) -> T:
        """The value the callback is completed with, validated as its type;
        until then the run is suspended, holding no worker. Raises
        CallbackTimeout once its timeout passed first, BadCallback for a
        completion that is not JSON of its type or is too large."""
        if self._taken is None:
            self._taken = await _take(self._run, self)
        return self._given(self._taken)

    def _given(self, taken: Taken) -> T:
        run = self._run
        if taken.took == "expired":
            raise CallbackTimeout(run.run_id, self.name, self.id, taken.at)
        if taken.took == "too-large":
            why = f"its body is {taken.size} bytes, over the {MAX_BODY} a completion may have"
            raise BadCallback(run.run_id, self.name, self.id, why)
        try:
            body = run.records.payloads.open_bytes(taken.body)
        except PayloadUnreadable as exc:
            raise unreadable(exc, f"run {run.run_id}: callback {self.name!r} ({self.id})") from None
        try:
            if self._output is Any:
                value: T = json.loads(body)
            else:
                value = TypeAdapter(self._output).validate_json(body)
        except ValidationError as exc:
            raise BadCallback(run.run_id, self.name, self.id, reason_of(exc)) from exc
        except ValueError as exc:
            why = f"its body is not JSON: {exc}"
            raise BadCallback(run.run_id, self.name, self.id, why) from exc
        return value


async def make(run: AttemptScope, name: str, lifetime: float | None, output: Any) -> Callback[Any]:
    """Record the callback ``name``, to expire ``lifetime`` seconds from now
    (None: never), once for the run, with its presigned URL where the store
    makes one: a replay reads both back, so it hands out the same URL."""
    memo = Memo(run, name, _ANY, internal="callback")
    callback_id = CallbackId.of(run.run_id, run.incarnation, memo.segment)
    found, recorded = await memo.lookup()
    if not found:
        expires = None
        if lifetime is not None:
            expires = wake_time(f"a timeout of {lifetime!r} s", run.clock.now() + lifetime)
        url = await _presigned(run, callback_id, expires)
        recorded = await memo.record({"expires": expires, "url": url, "inc": run.incarnation})
    try:
        expires_at = expiry_of(recorded)
    except ValueError as exc:
        raise CorruptMemo(memo.key, str(exc), job=run.kind, step=f"callback {name!r}") from exc
    url = recorded.get("url")
    if recorded.get("inc") != run.incarnation or not isinstance(url, str | None):
        url = await _presigned(run, callback_id, expires_at)  # (a replay as another incarnation)
    return Callback(run, name, callback_id, expires_at, url, output)


async def _presigned(
    run: AttemptScope, callback_id: CallbackId, expires: float | None
) -> str | None:
    """A presigned PUT of the callback's completion until ``expires`` (seven
    days at most), or None where the store presigns nothing (or it expired)."""
    store, now = run.store, run.clock.now()
    if not isinstance(store, PresignsPuts) or (expires is not None and expires <= now):
        return None
    left = MAX_PRESIGNED_LIFETIME if expires is None else expires - now
    return await store.presign_put(callback_id.completion(run.layout), left)


async def _take(run: AttemptScope, callback: Callback[Any]) -> Taken:
    """What the callback's wait took: recorded (by an earlier attempt, or
    another at once), or taken now (its completion, or its expiry); else
    the run suspends until a completion wakes it, or its timeout."""
    run.check_going()
    callback_id = CallbackId.parse(callback.id)
    layout, store = run.layout, run.store
    taken_key = callback_id.taken(layout)
    if run.memo_keys is not None and CALLBACK_TAKE_MEMO + callback_id.token in run.memo_keys:
        return await _recorded(run, taken_key, callback)
    completion = callback_id.completion(layout)
    now = run.clock.now()
    try:
        info = await store.head(completion)
    except NotFound:
        info = None
    if info is None:
        if callback.expires_at is not None and now >= callback.expires_at:
            decided = Taken("expired", now)
        else:
            until = now + run.wait_recheck
            if callback.expires_at is not None:
                until = min(until, callback.expires_at)
            wait = Wait(JobStatus.WAITING_FOR_CALLBACK, callback.name)
            raise run.suspend(Suspend(until, wait))
    elif info.size > MAX_BODY + ROOM:
        decided = Taken("too-large", now, etag=info.etag, size=info.size)
    else:
        # A completion put by runner.complete_callback is sealed already, one
        # put to the URL is plain: its record keeps it sealed either way.
        stored = await store.get(completion)
        body, payloads = stored.data, run.records.payloads
        try:
            size = payloads.plain_size(body)
        except PayloadUnreadable:
            size = len(body)  # (its wait says it does not open)
        if size > MAX_BODY:
            decided = Taken("too-large", now, etag=stored.etag, size=size)
        else:
            body = body if sealed(body) else payloads.seal_bytes(body)
            decided = Taken("completed", now, body, stored.etag, size)
    try:
        await store.put_if_absent(taken_key, decided.encode())
    except AlreadyExists:
        return await _recorded(run, taken_key, callback)  # (another attempt took first)
    if decided.took != "expired":
        await _tidy(run, completion, decided, callback)
    return decided


async def _recorded(run: AttemptScope, key: str, callback: Callback[Any]) -> Taken:
    try:
        return Taken.decode((await run.store.get(key)).data)
    except ValueError as exc:
        raise CorruptMemo(key, str(exc), job=run.kind, step=f"callback {callback.name!r}") from exc


async def _tidy(run: AttemptScope, completion: str, taken: Taken, callback: Callback[Any]) -> None:
    """Delete the completion taken (its record keeps it), so the look for
    completions lists only those not taken yet; one that another PUT
    replaced since it was read is ignored, and said so."""
    try:
        await run.store.delete(completion, if_match=taken.etag)
    except PreconditionFailed:
        log.warning(
            "run %s (%s): callback %r (%s) was completed again while its first completion "
            "was taken; the later one is ignored",
            run.run_id,
            run.kind,
            callback.name,
            callback.id,
            extra=log_extra(run),
        )
    except NotFound:
        pass
    except Exception as exc:  # (tidying only: the take is recorded)
        log.warning(
            "run %s: callback %s: its completion was not deleted: %s",
            run.run_id,
            callback.id,
            exc,
            extra=log_extra(run),
        )
