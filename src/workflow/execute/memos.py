"""Memos: the values a run records as it goes, and replays on a retry.

A :class:`Memo` is one recorded value of a run (a step's result, a wait's
wake time, the event a wait took, a child it submitted), written
create-if-absent under the run's incarnation: the first writer wins, so a
zombie's late write cannot replace it, and a retry reads it back instead of
doing the work again.

A memo of the run's history is keyed by its position in the run and
records its call (:mod:`stepstone.records.calls`): a replay that asks for
another call at a recorded position fails with NonDeterministicReplay
before anything runs. Memos recorded before positions existed are keyed by
name, and a replay still finds them by name (it cannot check their order,
so it never calls them divergent).

Memos are looked for only when an earlier claim of this run could have left
some (``Delivery.claims > 1``), or a replay copied some
(:mod:`stepstone.ops.replay`): a first claim reads no memos, it only writes them.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from stepstone.errors import CorruptMemo, EncodingError, NonDeterministicReplay, PayloadUnreadable
from stepstone.execute.scope import AttemptScope, log_extra
from stepstone.records.calls import CHANGED_ARGS_MEMO, Call, PositionedMemo, memo_value
from stepstone.records.codec import ResultCodec, pack
from stepstone.records.large_values import LargeField, Stored, write
from stepstone.records.layout import Path, branch_name, position_key, step_key
from stepstone.records.payloads import unreadable
from stepstone.store import AlreadyExists
from stepstone.store.parts import SplitObject

log = logging.getLogger("stepstone")

_DECODED = object()
"""In place of a recorded value that its caller gets decoded."""


class Memo:
    """One call: where its memo lives, and the two halves of memoizing it
    (look for a recorded value; record a new one, first writer wins). Split so
    a synchronous job can run the function itself in its own thread between them."""

    def __init__(
        self,
        run: AttemptScope,
        name: str,
        codec: ResultCodec,
        *,
        internal: str = "",
        positioned: bool = True,
        args: str | None = None,
        sealed: bool | None = None,
    ) -> None:
        """The memo of the next call of step ``name`` in the running branch
        of this run (:mod:`stepstone.execute.branches`). An ``internal`` memo
        (a wait's, ``internal="sleep"``) is a call of that sort. A
        ``positioned`` memo takes its branch's next position; one that is
        not (a rate limit's start, which belongs to an attempt, not to the
        run's history) is keyed by name, ``!rate.2@1``. ``args``: a step's
        arguments' fingerprint (:mod:`stepstone.records.fingerprint`).
        ``sealed``: its value is a payload, sealed by the run's codecs
        (:mod:`stepstone.records.payloads`); by default a step's is, an
        internal memo's (a wake time, an offset, an id) is not."""
        run.check_going()
        branch = run.branch_here()
        counted = f"!{internal}" + (f".{name}" if name else "") if internal else name
        occurrence = branch.occurrences.get(counted, 0) + 1
        branch.occurrences[counted] = occurrence
        self.run = run
        self.name = name or internal
        self.call = Call(internal or "step", name)
        self.branch = branch.path
        self._internal, self._occurrence = internal, occurrence
        self.position = branch.next_position() if positioned else None
        if self.position is None:
            self.segment = self.named
        else:
            self.segment = position_key(self.position, branch.path)
            run.made.add(self.segment)
        """Where its memo is written: under its place, or its name."""
        self.codec = codec
        self.sealed = not internal if sealed is None else sealed
        self.args = args
        self.began = run.clock.now()

    @functools.cached_property
    def named(self) -> str:
        """The key segment of a memo keyed by name (one of a run's history had
        one before positions existed; one outside it, a patch's, has one still)."""
        internal, occurrence = self._internal, self._occurrence
        if internal and not self.call.name:
            return f"!{internal}@{occurrence}"
        return step_key(self.call.name, occurrence, internal=internal, branch=self.branch)

    @property
    def key(self) -> str:
        """Where this call's memo is written."""
        run = self.run
        return run.layout.memo(run.run_id, run.incarnation, self.segment)

    async def lookup(self) -> tuple[bool, Any]:
        """Whether the call was recorded, and its value. Raises
        NonDeterministicReplay when another call was recorded at its position."""
        run = self.run
        keys = run.memo_keys
        if keys is None:
            return False, None
        if self.position is not None and self.segment in keys:
            field = memo_value(run.records.payloads)
            memo = self._checked(await run.store.get_split(self.key, field), field)
            data = memo.value
            await self._note_arguments(memo)
        elif self.named in keys:  # recorded by name (before positions existed)
            key = run.layout.memo(run.run_id, run.incarnation, self.named)
            data = (await run.store.get(key)).data
        else:
            return False, None
        run.replayed.append(self.named)
        log.debug(
            "run %s (%s) attempt %d: step %r replayed from its memo",
            run.run_id,
            run.kind,
            run.attempt.delivery.attempt,
            self.name,
            extra=log_extra(run),
        )
        return True, self._decoded(data)

    async def record(self, value: object) -> Any:
        """Record ``value`` (first writer wins) and return what a replay would:
        the value itself where it reads back as itself, else its encoding
        decoded, once this frame holds the value no more (a caller that
        hands it over, as a step does, lets a large one go before its
        decoded copy is made)."""
        run = self.run
        try:
            data = self.codec.encode_body(value)
        except (TypeError, ValueError) as exc:
            raise EncodingError(
                f"the result cannot be stored: {exc}", job=run.kind, step=self.name
            ) from exc
        if not self.codec.reads_back_as_itself(value):
            value = _DECODED
        stored = run.records.payloads.seal(data) if self.sealed else data
        if self.position is not None:
            stored = PositionedMemo(
                self.position,
                self.call,
                stored,
                self.branch,
                self.args,
                run.code_version,
                self.began,
                run.clock.now(),
            ).encode()
        try:
            await write(run.store, self.key, stored, if_absent=True)
        except AlreadyExists:
            # Another attempt of this run (a zombie, or the attempt this one
            # replaced) recorded this position first: its value is the call's
            # value, if it recorded this call.
            recorded: Stored
            if self.position is None:
                recorded = (await run.store.get(self.key)).data
            else:
                field = memo_value(run.records.payloads)
                recorded = self._checked(await run.store.get_split(self.key, field), field).value
            log.info(
                "run %s (%s) attempt %d: step %r was recorded by another attempt; "
                "continuing with the recorded value",
                run.run_id,
                run.kind,
                run.attempt.delivery.attempt,
                self.name,
                extra=log_extra(run),
            )
            return self._decoded(recorded)
        return self._decoded(data, opened=True) if value is _DECODED else value

    def _checked(self, found: SplitObject, field: LargeField) -> PositionedMemo:
        """The positioned memo ``found`` holds, once its call is this one;
        NonDeterministicReplay (kept on the run, so every later call raises
        it too) when it is another."""
        try:
            memo = PositionedMemo.read_split(found, field)
        except ValueError as exc:
            raise CorruptMemo(self.key, str(exc), job=self.run.kind, step=self.name) from exc
        except PayloadUnreadable as exc:
            raise unreadable(
                exc, f"job {self.run.kind!r}, step {self.name!r}, memo {self.key}"
            ) from None
        run = self.run
        if memo.call != self.call:
            assert self.position is not None
            run.diverged_at = self.segment
            run.diverged = NonDeterministicReplay(
                run.run_id,
                run.kind,
                self.position,
                memo.call.describe(),
                self.call.describe(),
                branch=branch_name(self.branch),
                recorded_by=memo.by,
            )
            raise run.diverged
        return memo

    async def _note_arguments(self, memo: PositionedMemo) -> None:
        """When this replay passes other arguments than ``memo`` recorded (a
        step given ``datetime.now()``, or code that changed what it passes):
        say so in the log, and in a note beside the memo that ``stepstone
        show`` and the web view show. The recorded result is the step's
        result all the same: the step ran once, with the arguments it
        recorded. The note is best effort: it never fails the replay."""
        if self.args is None or memo.args is None or memo.args == self.args:
            return
        run = self.run
        log.warning(
            "run %s (%s): %s (%s) was called with other arguments than it recorded; "
            "its recorded result was replayed",
            run.run_id,
            run.kind,
            self.call.describe(),
            where(self.branch, self.position),
            extra=log_extra(run),
        )
        note = {"recorded": memo.args, "called": self.args, "claim": run.attempt.delivery.claims}
        key = run.layout.memo(run.run_id, run.incarnation, CHANGED_ARGS_MEMO + self.segment)
        try:
            await run.store.put(key, pack({**note, "at": run.clock.now()}))
        except Exception as exc:
            log.warning(
                "run %s: the note of changed arguments was not written: %s", run.run_id, exc
            )

    def _decoded(self, data: Stored, *, opened: bool = False) -> Any:
        """The recorded value (opened, :mod:`stepstone.records.payloads`, unless
        ``opened``); CorruptMemo, naming the step and the key, when it does
        not decode (as the step function's return type); PayloadUnreadable,
        naming them and the key id, when it is sealed and does not open here."""
        try:
            if not opened:
                data = self.run.records.payloads.open(data)
        except PayloadUnreadable as exc:
            raise unreadable(
                exc, f"job {self.run.kind!r}, step {self.name!r}, memo {self.key}"
            ) from None
        try:
            return self.codec.decode(data)
        except Exception as exc:  # garbage decodes into any error: each is this memo's fault
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise CorruptMemo(self.key, reason, job=self.run.kind, step=self.name) from exc


def where(branch: Path, position: int | None) -> str:
    """A call's place as words: ``position 3``, ``position 3 of branch 2.1``."""
    at = f"position {position}"
    return f"{at} of branch {branch_name(branch)}" if branch else at
