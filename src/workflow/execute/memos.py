"""Memos: the values a run records as it goes, and replays on a retry.

A :class:`Memo` is one recorded value of a run (a step's result, a wait's
wake time, the event a wait took), written create-if-absent under the run's
incarnation: the first writer wins, so a zombie's late write cannot replace
it, and a retry reads it back instead of doing the work again.

Memos are looked for only when an earlier claim of this run could have left
some (``Delivery.claims > 1``): a first claim reads no memos, it only writes them.
"""

from __future__ import annotations

import logging
from typing import Any

from stepstone.errors import CorruptMemo, EncodingError
from stepstone.execute.scope import AttemptScope, log_extra
from stepstone.records.codec import ResultCodec
from stepstone.records.layout import step_key
from stepstone.store import AlreadyExists

log = logging.getLogger("stepstone")


class Memo:
    """One step call: where its memo lives, and the two halves of memoizing it
    (look for a recorded value; record a new one, first writer wins). Split so
    a synchronous job can run the function itself in its own thread between them."""

    def __init__(
        self, run: AttemptScope, name: str, codec: ResultCodec, *, internal: str = ""
    ) -> None:
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
            "run %s (%s) attempt %d: step %r replayed from its memo",
            run.run_id,
            run.kind,
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
                f"the result cannot be stored: {exc}", job=run.kind, step=self.name
            ) from exc
        try:
            await run.store.put_if_absent(self.key, data)
        except AlreadyExists:
            # Another attempt of this run (a zombie, or the attempt this one
            # replaced) recorded the step first: its value is the step's value.
            data = (await run.store.get(self.key)).data
            log.info(
                "run %s (%s) attempt %d: step %r was recorded by another attempt; "
                "continuing with the recorded value",
                run.run_id,
                run.kind,
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
            raise CorruptMemo(self.key, reason, job=self.run.kind, step=self.name) from exc
