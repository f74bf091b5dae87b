"""A debounced run's start: it waits for its window to close, then takes its last input.

A run made by debounced submits (:mod:`stepstone.submit.debouncing`) is
enqueued due at once, and later submits move its window's due time on.
So before its input is decoded, an attempt of such a run (its delivery
carries the ``stepstone.debounce`` header) asks its key's object:

1. its input recorded as a memo of the run (``!debounce.input``), by an
   earlier claim: that is its input (a retry runs what the first attempt ran);
2. else its window not due yet: the run suspends until it is
   (``debounced``, holding no worker), and asks again then;
3. else the window closes (no submit joins it after this) and the run
   takes its last input: recorded as the memo, then the window dropped.
   A claim that dies between the close and the memo finds the window
   closed, with the input, on the run's next claim.

A run whose window is gone and that recorded no input (the key's object
was removed by hand) runs the input it was enqueued with, with a warning.
The run's envelope is given the input it runs, so its outcome record
keeps what ran; its input hash stays the one it was enqueued with (its
handles, from debounced submits, check none).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime

from stepstone.execute.memos import Memo
from stepstone.execute.scope import AttemptScope, log_extra
from stepstone.records import debounce_windows as rules
from stepstone.records.codec import codec_for_type
from stepstone.records.envelope import Envelope
from stepstone.runtime.status import JobStatus, Wait
from stepstone.runtime.suspension import Suspend
from stepstone.submit.debouncing import DEBOUNCE_HEADER, Debouncer, debounce_digest

log = logging.getLogger("stepstone")

_BYTES = codec_for_type(bytes)


async def debounced_input(debouncer: Debouncer, envelope: Envelope, run: AttemptScope) -> Envelope:
    """``envelope`` with the input its run runs (see the module docstring);
    raises Suspend while its window is not due."""
    headers = run.attempt.delivery.headers
    digest = debounce_digest(headers)
    if digest is None:
        if DEBOUNCE_HEADER in headers:
            log.warning(
                "run %s: its %s header %r names no debounce key; it runs the input it was "
                "enqueued with",
                run.run_id,
                DEBOUNCE_HEADER,
                headers[DEBOUNCE_HEADER][:80],
                extra=log_extra(run),
            )
        return envelope
    memo = Memo(run, "input", _BYTES, internal="debounce", positioned=False)
    found, data = await memo.lookup()
    if not found:
        windows = debouncer.windows(digest)
        run_id = run.run_id
        taken = await windows.update(lambda state, now: rules.take(state, run=run_id, now=now))
        if taken.until is not None:
            raise Suspend(taken.until, Wait(JobStatus.DEBOUNCED, _shown(taken)))
        if taken.input is None:
            log.warning(
                "run %s: its debounce window is gone and it recorded no input; it runs "
                "the input it was enqueued with",
                run.run_id,
                extra=log_extra(run),
            )
            return envelope
        data = await memo.record(taken.input)
        await windows.update(lambda state, now: rules.drop(state, run=run_id))
    if not isinstance(data, bytes) or data == envelope.input:
        return envelope
    # (Its input hash stays the one it was enqueued with, which its queue
    # record and every look for its outcome compare with.)
    return replace(envelope, input=data)


def _shown(taken: rules.WindowAnswer) -> str:
    """What ``stepstone ls`` and ``show`` say a debounced run waits for."""
    window = taken.window
    assert window is not None and taken.until is not None
    until = datetime.fromtimestamp(taken.until, UTC).isoformat(timespec="milliseconds")
    submits = "1 submit" if window.count == 1 else f"{window.count} submits"
    return f"until {until} ({submits})"
