"""One attempt's bookkeeping, and memos: what a run records as it goes.

A :class:`Run` is shared by the attempt's JobContext, its waits and the
executor. A :class:`Memo` is one recorded value of a run (a step's result,
a wait's wake time, the event a wait took), written create-if-absent under
the run's incarnation: the first writer wins, so a zombie's late write
cannot replace it, and a retry reads it back instead of doing the work again.

Memos are looked for only when an earlier claim of this run could have left
some (``Delivery.claims > 1``): a first claim reads no memos, it only writes them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from stepstone.errors import CorruptMemo, EncodingError
from stepstone.records.codec import ResultCodec
from stepstone.records.layout import Layout, step_key
from stepstone.records.run_records import RunRecords
from stepstone.runtime.clock import Clock
from stepstone.runtime.worker import Attempt
from stepstone.store import AlreadyExists, ObjectStore
from stepstone.submit.submitter import Submitter

log = logging.getLogger("stepstone")

PROGRESS_INTERVAL = 1.0
"""At most one progress write per run per this many seconds; the last value is
always written before the run settles."""


class Run:
    """One attempt's bookkeeping, shared by its JobContext and the executor."""

    def __init__(
        self,
        *,
        submitter: Submitter,
        state_of: Callable[[type[Any]], Any],
        records: RunRecords,
        attempt: Attempt,
        name: str,
        incarnation: str,
        memo_keys: set[str] | None,
        headers: Mapping[str, str],
        clock: Clock,
        wakes: bool,
        wait_recheck: float,
    ) -> None:
        self.submitter = submitter
        self.state_of = state_of
        self.records = records
        self.store: ObjectStore = records.store
        self.layout: Layout = records.layout
        self.attempt = attempt
        self.name = name
        self.incarnation = incarnation
        self.memo_keys = memo_keys
        self.headers = headers
        self.occurrences: dict[str, int] = {}
        self.children = 0
        self.progress: Any = None
        self.progress_written: Any = None
        self.progress_at = 0.0
        self.progress_task: asyncio.Task[None] | None = None
        self.progress_etag: str | None = None
        """This attempt's last progress write (compare-and-swap on it)."""
        self.progress_fenced = False
        """A later claim of the run has written progress: this attempt writes no more."""
        self.replayed: list[str] = []
        self.clock = clock
        self.wakes = wakes
        """Whether the queue wakes a suspended run early (else waits look again)."""
        self.wait_recheck = wait_recheck
        """Longest a waiting run stays suspended before it looks again."""
        self.consumed_events: set[str] = set()

    @property
    def run_id(self) -> str:
        return self.attempt.delivery.id

    async def flush_progress(self) -> None:
        if self.progress_task is not None:
            await asyncio.shield(self.progress_task)
        if self.progress is not None and self.progress != self.progress_written:
            await self.write_progress()

    async def write_progress(self) -> None:
        """Write the last progress value, unless a later claim of the run owns
        the record (then log it once and write no more)."""
        if self.progress_fenced:
            return
        value = self.progress
        delivery = self.attempt.delivery
        etag = await self.records.write_progress(
            self.run_id, self.incarnation, delivery.claims, value, self.progress_etag
        )
        if etag is None:
            self.progress_fenced = True
            log.warning(
                "job %s (%s) attempt %d: another worker has taken the run over; "
                "this attempt's progress is not written",
                self.run_id,
                self.name,
                delivery.attempt,
                extra=log_extra(self),
            )
            return
        self.progress_etag = etag
        self.progress_written = value

    def write_progress_soon(self) -> None:
        """Write the progress in the background, best effort (see ctx.progress)."""
        self.progress_task = asyncio.get_running_loop().create_task(_write_progress(self))


class Memo:
    """One step call: where its memo lives, and the two halves of memoizing it
    (look for a recorded value; record a new one, first writer wins). Split so
    a synchronous job can run the function itself in its own thread between them."""

    def __init__(self, run: Run, name: str, codec: ResultCodec, *, internal: str = "") -> None:
        """The memo of the next call of step ``name`` in this run. An
        ``internal`` memo (a wait's, ``internal="sleep"``) is counted and
        keyed apart from steps: ``!sleep@1``, ``!event.approval@2``."""
        counted = f"!{internal}" + (f".{name}" if name else "") if internal else name
        occurrence = run.occurrences.get(counted, 0) + 1
        run.occurrences[counted] = occurrence
        self.run = run
        self.name = name or internal
        if internal and not name:
            self.segment = f"!{internal}@{occurrence}"
        else:
            self.segment = step_key(name, occurrence, internal=internal)
        self.key = run.layout.memo(run.run_id, run.incarnation, self.segment)
        self.codec = codec

    async def lookup(self) -> tuple[bool, Any]:
        run = self.run
        if run.memo_keys is None or self.segment not in run.memo_keys:
            return False, None
        recorded = await run.store.get(self.key)
        run.replayed.append(self.segment)
        log.debug(
            "job %s (%s) attempt %d: step %r replayed from its memo",
            run.run_id,
            run.name,
            run.attempt.delivery.attempt,
            self.name,
            extra=log_extra(run),
        )
        return True, self._decoded(recorded.data)

    async def record(self, value: object) -> Any:
        run = self.run
        try:
            data = self.codec.encode(value)
        except (TypeError, ValueError) as exc:
            raise EncodingError(
                f"the result cannot be stored: {exc}", job=run.name, step=self.name
            ) from exc
        try:
            await run.store.put_if_absent(self.key, data)
        except AlreadyExists:
            # Another attempt of this run (a zombie, or the attempt this one
            # replaced) recorded the step first: its value is the step's value.
            data = (await run.store.get(self.key)).data
            log.info(
                "job %s (%s) attempt %d: step %r was recorded by another attempt; "
                "continuing with the recorded value",
                run.run_id,
                run.name,
                run.attempt.delivery.attempt,
                self.name,
                extra=log_extra(run),
            )
        return self._decoded(data)

    def _decoded(self, data: bytes) -> Any:
        """The recorded value; CorruptMemo, naming the step and the key, when
        it does not decode (as the step function's return type)."""
        try:
            return self.codec.decode(data)
        except Exception as exc:  # garbage decodes into any error: each is this memo's fault
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise CorruptMemo(self.key, reason, job=self.run.name, step=self.name) from exc


async def _write_progress(run: Run) -> None:
    try:
        await run.write_progress()
    except Exception as exc:  # progress is best-effort until the final flush
        log.warning("job %s: progress not written: %s", run.run_id, exc, extra=log_extra(run))


def log_extra(run: Run) -> dict[str, object]:
    return {"job_id": run.run_id, "job_name": run.name, "attempt": run.attempt.delivery.attempt}
