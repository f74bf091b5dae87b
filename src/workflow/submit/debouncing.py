"""Debounced submits: the submits of one key within ``wait`` of each other, one run.

A submit with ``SubmitOptions(debounce=Debounce(key, wait, max_wait))``
does not enqueue a run of its own. It updates its key's object
(``debounce/<digest>``, :mod:`stepstone.records.debounce_windows`) by
compare-and-swap: it joins the open window (moving its due time to ``wait``
from now, within ``max_wait`` of the first, and leaving its input as the
window's), or opens one under a fresh run id. Every process's submits of
the key go through that one object, so they agree on which run each joined.

The submit that opens a window enqueues its run, due at once (claimed, it
suspends as ``debounced`` until its window is due, :mod:`stepstone.execute.debounced`),
under the window's run id (keyed, so a second enqueue of it changes
nothing), and then marks the window enqueued; a submit that joins a window
not yet marked enqueues it too, so a window whose opener died before
enqueueing still gets its run. The run takes its window's last input when
it starts (:mod:`stepstone.execute.debounced`).

Cost per submit, in the common case (the window open and enqueued): one
conditional PUT, with one GET first when another process wrote the object
since this one last did; a submit that opens a window adds the run's
enqueue (as a keyed submit's) and one more PUT.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from stepstone.errors import DebounceBacklog
from stepstone.handles.handle import Answers, JobHandle
from stepstone.limits.shared import KeptObjects, SharedObject
from stepstone.records import debounce_windows as rules
from stepstone.records.layout import Layout, fresh_run_id, limit_digest
from stepstone.records.payloads import Payloads
from stepstone.runtime.clock import Clock
from stepstone.store import ObjectStore
from stepstone.submit.submission import Submission

DEBOUNCE_HEADER = "stepstone.debounce"
"""The header naming a debounced run's key: the digest its object is named by."""

_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def debounce_digest(headers: Mapping[str, str]) -> str | None:
    """The digest of the debounce key a run's headers name (None: not
    debounced, or a header that names no key: a digest is 64 hex digits)."""
    digest = headers.get(DEBOUNCE_HEADER)
    return digest if digest is not None and _DIGEST.match(digest) else None


class Debouncer:
    """Submits debounced jobs: joins or opens their key's window, and
    enqueues a window's run through ``submit_one`` (the keyed-submit
    protocol) when it is not known to be enqueued yet."""

    def __init__(
        self,
        *,
        store: ObjectStore,
        layout: Layout,
        payloads: Payloads,
        clock: Clock,
        answers: Answers,
        submit_one: Callable[[Submission], Awaitable[JobHandle[Any]]],
    ) -> None:
        self._layout = layout
        self._payloads = payloads
        self._answers = answers
        self._submit_one = submit_one
        self._windows: KeptObjects[rules.Windows] = KeptObjects(
            lambda key: SharedObject(
                store, key, clock, to_fields=rules.to_fields, from_fields=rules.from_fields
            )
        )

    def windows(self, digest: str) -> SharedObject[rules.Windows]:
        """This process's handle on the windows of the key of ``digest``
        (shared with the runs that take them, so neither reads the other's
        writes back)."""
        return self._windows(self._layout.debounce(digest))

    async def read(self, digest: str) -> rules.Windows | None:
        """The windows of the key of ``digest`` as stored now (``show``)."""
        return await self.windows(digest).read()

    async def submit(self, s: Submission) -> JobHandle[Any]:
        """Submit ``s`` (its options debounce it); a handle on its window's run."""
        debounce = s.options.debounce
        assert debounce is not None
        digest = limit_digest(s.kind, debounce.key)
        windows = self.windows(digest)
        fresh = fresh_run_id()
        data = self._payloads.seal_bytes(s.data)  # (a payload: sealed as the run's input is)

        def join(state: rules.Windows | None, now: float) -> tuple[rules.Windows, rules.Joined]:
            return rules.join(
                state,
                job=s.kind,
                key=debounce.key,
                run=fresh,
                data=data,
                wait=debounce.wait,
                max_wait=debounce.max_wait,
                now=now,
            )

        joined = await windows.update(join)
        if joined.refused:
            raise DebounceBacklog(
                f"job {s.kind!r}, debounce key {debounce.key!r}: {rules.MAX_WINDOWS} windows "
                "wait for their runs already; is a worker running this job type?"
            )
        if not joined.enqueued:
            # Due now: claimed, it waits for its window as ``debounced``
            # (what ``ls``, ``status()`` and ``show`` say of it), holding no worker.
            s.run_id, s.run_at, s.debounced = joined.run, None, True
            s.headers = {**s.headers, DEBOUNCE_HEADER: digest}
            await self._submit_one(s)
            run = joined.run
            await windows.update(lambda state, now: rules.enqueued(state, run=run))
        handle: JobHandle[Any] = JobHandle(
            self._answers, joined.run, s.output, newly_submitted=joined.opened, kind=s.kind
        )
        handle.debounced = joined
        return handle
