"""The commands that inspect and operate on runs: ls, show, history, send-event,
retry, cancel, replay, purge, stats
(the fleet's, workers and schedules, are in :mod:`stepstone.cli.fleet`).

Each opens the runner the options name, does one thing through
:mod:`stepstone.ops`, prints it (a table or ``--json``) and closes the
runner. A command on one run takes its id, any unique start of it, or
``--key``, the idempotency key it was submitted with; a bulk
action (``retry``, ``cancel``, ``replay`` with filters instead of an id) says how many
runs match, asks, and exits with its own status (``statuses.PARTIAL``) when
it could not touch some. Each returns
the exit status; failures are raised, for ``entry.main`` to print in one line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import TextIO

from stepstone.cli import statuses
from stepstone.cli.attributes import parse_attributes
from stepstone.cli.audit import operator
from stepstone.cli.durations import parse_duration, parse_since
from stepstone.cli.errors import CliError
from stepstone.cli.render import (
    detail_json,
    emit_json,
    listed_json,
    print_attempts,
    print_detail,
    print_listing,
    table,
    unreadable_json,
    warn_unreadable,
)
from stepstone.cli.runners import runner_from_args
from stepstone.cli.talk import print_talk, talk_json
from stepstone.errors import EncodingError, EventRefused, InspectError
from stepstone.ops import actions, listing, reads, run_ids, talk
from stepstone.ops.audited import Said, audited, done, of_bulk
from stepstone.ops.by_attributes import find_runs
from stepstone.ops.listing import RunFilter
from stepstone.ops.patches import PatchPaths, patch_paths
from stepstone.ops.replay import replay, replay_many
from stepstone.records.layout import run_id_for_key
from stepstone.runner import JobRunner
from stepstone.runtime.status import JobStatus
from stepstone.telemetry.escaping import escape_controls


async def _with_runner(
    args: argparse.Namespace, body: Callable[[JobRunner], Awaitable[int]]
) -> int:
    runner = await runner_from_args(args)
    try:
        return await body(runner)
    finally:
        await runner.close()


def cmd_ls(args: argparse.Namespace) -> int:
    if args.patch is not None:
        return _ls_patch(args)

    async def body(runner: JobRunner) -> int:
        now = runner.clock.now()
        listed = await find_runs(runner, _filter(args, now), limit=args.limit)
        rows = listed.rows
        warn_unreadable(listed.unreadable)
        if args.json:
            emit_json(
                {
                    "runs": [listed_json(r) for r in rows],
                    "unreadable": unreadable_json(listed.unreadable),
                }
            )
            return 0
        out = sys.stdout
        if rows:
            print_listing(out, rows, now)
        where = _sources(args.status, bool(getattr(args, "attr", None)))
        more = " (--limit reached)" if len(rows) >= args.limit else ""
        out.write(f"{len(rows)} run(s) from {where}, newest first{more}\n")
        return 0

    return asyncio.run(_with_runner(args, body))


def _ls_patch(args: argparse.Namespace) -> int:
    """``ls --patch X``: the runs not finished that may still take the old
    path of patch X, and how many have taken each."""
    if args.status is not None and JobStatus(args.status).finished:
        raise CliError(f"a {args.status} run takes no path of a patch: --patch lists live runs", 2)

    async def body(runner: JobRunner) -> int:
        now = runner.clock.now()
        found = await patch_paths(runner, args.patch, _filter(args, now))
        warn_unreadable(found.unreadable)
        rows = found.may_take_the_old_path
        if args.json:
            emit_json(
                {
                    "patch": args.patch,
                    "old": [listed_json(r) for r in found.old],
                    "past": [listed_json(r) for r in found.past],
                    "not_yet": [listed_json(r) for r in found.not_yet],
                    "unplaced": [listed_json(r) for r in found.unplaced],
                    "new": len(found.new),
                    "points": found.points,
                    "unreadable": unreadable_json(found.unreadable),
                }
            )
            return 0
        if rows:
            print_listing(sys.stdout, rows, now)
        print(escape_controls(_patch_summary(args.patch, found)))
        return 0

    return asyncio.run(_with_runner(args, body))


def _patch_summary(change_id: str, found: PatchPaths) -> str:
    """What ``ls --patch`` says of the runs it lists, by what the store tells of each."""
    said = [
        f"{len(found.old)} took it",
        f"{len(found.past)} went past its point on the old code (they take it when they go on)",
        f"{len(found.not_yet)} have not reached it",
    ]
    if found.unplaced:
        said.append(
            f"{len(found.unplaced)} have not met it, nor has any run of their kind "
            "(before its point or past it, no record says)"
        )
    return (
        f"{len(found.may_take_the_old_path)} run(s) not finished may still take the old path "
        f"of patch {change_id!r}: {', '.join(said)} ({len(found.new)} took the new path)"
    )


def _filter(args: argparse.Namespace, now: float, status: str | None = None) -> RunFilter:
    """The runs ``--status``, ``--kind``, ``--since``, ``--version`` and
    ``--key-prefix`` choose (``status``: the status when none is given)."""
    wanted = getattr(args, "status", None) or status
    attrs = getattr(args, "attr", None)
    return RunFilter(
        status=None if wanted is None else reads.parse_status(wanted),
        kind=args.kind,
        since=None if args.since is None else parse_since(args.since, now),
        version=args.version,
        key_prefix=args.key_prefix,
        attributes=None if not attrs else parse_attributes(attrs),
    )


def _filtered(args: argparse.Namespace) -> bool:
    """Whether the command was given any filter (a bulk action) rather than an id."""
    return any(
        getattr(args, name, None) is not None
        for name in ("status", "kind", "since", "version", "key_prefix")
    )


def _sources(status: str | None, attributes: bool = False) -> str:
    if attributes:
        return "the index of attributes"
    if status is None:
        return "the queue and outcomes/"
    if JobStatus(status).finished:
        return "outcomes/ (finished runs)"
    return "the queue"


def cmd_show(args: argparse.Namespace) -> int:
    _one_run(args, "show")

    async def body(runner: JobRunner) -> int:
        found = await _detail(runner, args)
        warn_unreadable(found.unreadable_attempts)  # (the other parts say so in place)
        streams, callbacks = await asyncio.gather(
            talk.streams_of(runner, found), talk.callbacks_of(runner, found)
        )
        if args.json:
            emit_json({**detail_json(found), **talk_json(streams, callbacks)})
        else:
            print_detail(sys.stdout, found)
            print_talk(sys.stdout, streams, callbacks)
        return 0

    return asyncio.run(_with_runner(args, body))


def cmd_history(args: argparse.Namespace) -> int:
    _one_run(args, "history")

    async def body(runner: JobRunner) -> int:
        found = await _detail(runner, args)
        warn_unreadable(found.unreadable_attempts)
        if args.json:
            emit_json({"id": found.id, "attempts": detail_json(found)["attempts"]})
        else:
            sys.stdout.write(f"run {found.id} ({found.status or 'unknown'})\n")
            print_attempts(sys.stdout, found)
        return 0

    return asyncio.run(_with_runner(args, body))


def cmd_send_event(args: argparse.Namespace) -> int:
    _one_run(args, "send-event")
    try:
        payload = None if args.payload is None else json.loads(args.payload)
    except ValueError as exc:
        raise CliError(f"--payload is not JSON: {exc}", 2) from None

    async def body(runner: JobRunner) -> int:
        with _named_by_key(args):
            run_id = await _run_of(runner, args)
            try:
                sent = await runner.send_event(run_id, args.name, payload, key=args.event_key)
            except (EventRefused, EncodingError) as exc:
                raise InspectError(str(exc)) from None
        if args.json:
            emit_json({"id": run_id, "event": args.name, "sent": sent})
        elif sent:
            print(escape_controls(f"sent event {args.name!r} to {run_id}"))
        else:
            print(
                escape_controls(
                    f"event {args.name!r} with key {args.event_key!r} was sent to {run_id} "
                    "before: not sent again"
                )
            )
        return 0

    return asyncio.run(_with_runner(args, body))


def _one_run(args: argparse.Namespace, command: str) -> None:
    """A command on one run is given its id or ``--key``, one of the two."""
    if (args.id is None) == (args.key is None):
        raise CliError(
            f"{command} takes a run id (or a unique start of one), or --key IDEMPOTENCY_KEY", 2
        )


async def _run_of(runner: JobRunner, args: argparse.Namespace) -> str:
    """The run ``args`` name: by ``--key`` (its run id is the key's SHA-256),
    or by an id or a unique start of one."""
    if args.key is not None:
        return run_id_for_key(args.key)
    return await run_ids.resolve_id(runner, args.id)


@contextlib.contextmanager
def _named_by_key(args: argparse.Namespace) -> Iterator[None]:
    """What goes wrong with a run named by ``--key`` says the key."""
    try:
        yield
    except InspectError as exc:
        if args.key is None:
            raise
        raise InspectError(f"idempotency key {args.key!r}: {exc}") from None


async def _detail(runner: JobRunner, args: argparse.Namespace) -> reads.Detail:
    with _named_by_key(args):
        return await reads.detail(runner, await _run_of(runner, args))


def cmd_retry(args: argparse.Namespace) -> int:
    if _filtered(args):
        if args.id is not None or args.key is not None:
            raise CliError(
                "retry takes a run id or filters (--status dead, --kind, ...), not both", 2
            )
        if args.status not in (None, JobStatus.DEAD.value):
            raise CliError("only dead runs can be retried: --status dead, or leave it out", 2)
        return _bulk(args, "retry", actions.retry_many, {})
    if args.id is None and args.key is None:
        raise CliError(
            "retry takes a run id (or a start of it), --key, or filters: --status dead ...", 2
        )
    _one_run(args, "retry")

    async def body(runner: JobRunner) -> int:
        with _named_by_key(args):
            run_id = await _run_of(runner, args)
            removed = await audited(
                runner,
                operator(),
                "retry",
                [run_id],
                lambda: actions.retry(runner, run_id),
                done("requeued"),
            )
        if removed is not None:
            warn_unreadable([removed])
        if args.json:
            emit_json({"id": run_id, "requeued": True})
        else:
            print(f"requeued {run_id} (its failed outcome was removed; finished steps replay)")
        return 0

    return asyncio.run(_with_runner(args, body))


BulkAction = Callable[[JobRunner, list[str]], Awaitable[actions.Bulk]]


def _bulk(
    args: argparse.Namespace, verb: actions.BulkVerb, act: BulkAction, detail: dict[str, str]
) -> int:
    """A bulk action: list the runs the filters choose and of those the ones
    ``verb`` takes (:func:`stepstone.ops.actions.bulk_choice`), say how many,
    confirm, act on each (recorded in the audit log with ``detail`` and the
    runs chosen), and say which could not be done; exit
    ``statuses.PARTIAL`` when any could not (or could not be read)."""

    async def body(runner: JobRunner) -> int:
        chosen, keep = actions.bulk_choice(verb, _filter(args, runner.clock.now()))
        listed = await listing.list_runs(runner, chosen, limit=None)
        warn_unreadable(listed.unreadable)
        run_ids = [row.id for row in listed.rows if keep(row)]
        note = sys.stderr if args.json else sys.stdout  # stdout holds the one JSON document
        matched = f"{len(run_ids)} {actions.described(chosen, args.since)}"
        note.write(f"{matched} match\n")
        note.flush()
        if run_ids and not args.yes:
            _confirm(f"{verb} {matched}?")
        if run_ids:
            chose = {"chose": actions.described(chosen, args.since), **detail}
            done = await audited(
                runner,
                operator(),
                verb,
                run_ids,
                lambda: act(runner, run_ids),
                of_bulk,
                detail=chose,
            )
        else:
            done = await act(runner, run_ids)
        warn_unreadable(done.unreadable)
        # A record that would not decode is a run left untouched, unless it
        # was read beside one acted on (a dead run's outcome).
        acted = set(run_ids)
        unlisted = [u for u in listed.unreadable if u.key.rsplit("/", 1)[-1] not in acted]
        untouched = len(done.refused) + len(unlisted)
        if args.json:
            emit_json(
                {
                    "matched": len(run_ids),
                    done.verb: done.done,
                    "refused": [{"id": i, "reason": why} for i, why in done.refused.items()],
                    "unreadable": unreadable_json(unlisted),
                }
            )
        else:
            print(f"{done.verb} {len(done.done)} of {matched}")
            for run_id, why in done.refused.items():
                print(escape_controls(f"not {done.verb} {run_id}: {why}"))
            if unlisted:
                print(
                    f"{len(unlisted)} record(s) could not be read, so their runs were not touched"
                )
        return statuses.PARTIAL if untouched else statuses.OK

    return asyncio.run(_with_runner(args, body))


def _confirm(question: str) -> None:
    """Ask on the terminal; anything but yes (or stdin that is no terminal) stops the command."""
    if not sys.stdin.isatty():
        raise CliError(f"not confirmed: stdin is not a terminal; pass --yes to {question[:-1]}")
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise CliError("not confirmed; nothing was done")


def cmd_cancel(args: argparse.Namespace) -> int:
    if _filtered(args):
        if args.id is not None or args.key is not None:
            raise CliError("cancel takes a run id or filters (--status, --kind, ...), not both", 2)
        if args.status is not None and JobStatus(args.status).finished:
            raise CliError(f"a {args.status} run has finished: there is nothing to cancel", 2)
        leave = args.leave_children
        return _bulk(
            args,
            "cancel",
            lambda r, ids: actions.cancel_many(r, ids, leave_children=leave),
            {"leave_children": "yes"} if leave else {},
        )
    if args.id is None and args.key is None:
        raise CliError(
            "cancel takes a run id (or a start of it), --key, or filters: --kind K ...", 2
        )
    _one_run(args, "cancel")

    async def body(runner: JobRunner) -> int:
        with _named_by_key(args):
            run_id = await _run_of(runner, args)
            done = await audited(
                runner,
                operator(),
                "cancel",
                [run_id],
                lambda: actions.cancel(runner, run_id, leave_children=args.leave_children),
                lambda done: Said(
                    "done", "cancelled" if done == "cancelled" else "discarded dead run"
                ),
                detail={"leave_children": "yes"} if args.leave_children else None,
            )
        if args.json:
            emit_json({"id": run_id, "result": done})
        elif done == "cancelled":
            print(f"cancelled {run_id}")
        else:
            print(f"discarded dead run {run_id} from the queue (its failed outcome stays)")
        return 0

    return asyncio.run(_with_runner(args, body))


def cmd_replay(args: argparse.Namespace) -> int:
    if _filtered(args):
        if args.id is not None or args.key is not None:
            raise CliError("replay takes a run id or filters (--status, --kind, ...), not both", 2)

        async def each(runner: JobRunner, run_ids: list[str]) -> actions.Bulk:
            return await replay_many(runner, run_ids, from_step=args.from_step)

        return _bulk(
            args, "replay", each, {} if args.from_step is None else {"from_step": args.from_step}
        )
    if args.id is None and args.key is None:
        raise CliError(
            "replay takes a run id (or a start of it), --key, or filters: --kind K ...", 2
        )
    _one_run(args, "replay")

    async def body(runner: JobRunner) -> int:
        with _named_by_key(args):
            run_id = await _run_of(runner, args)
            done = await audited(
                runner,
                operator(),
                "replay",
                [run_id],
                lambda: replay(runner, run_id, from_step=args.from_step),
                lambda done: Said("done", f"replaying as incarnation {done.incarnation}"),
                detail=None if args.from_step is None else {"from_step": args.from_step},
            )
        if args.json:
            emit_json(
                {
                    "id": run_id,
                    "incarnation": done.incarnation,
                    "replaced": done.replaced,
                    "from_step": done.from_step,
                    "position": done.position,
                    "kept_memos": done.kept_memos,
                    "kept_events": done.kept_events,
                }
            )
        else:
            start = "the start" if done.from_step is None else f"step {done.from_step!r}"
            print(
                escape_controls(
                    f"replaying {run_id} from {start} as incarnation {done.incarnation} "
                    f"({done.kept_memos} memo(s) kept from incarnation {done.replaced})"
                )
            )
        return 0

    return asyncio.run(_with_runner(args, body))


def cmd_purge(args: argparse.Namespace) -> int:
    age = parse_duration(args.older_than)

    async def body(runner: JobRunner) -> int:
        progress = _Progress(sys.stderr, "checking" if args.dry_run else "purging")
        try:
            if args.dry_run:  # changes nothing: not recorded
                removed = await actions.purge(runner, age, dry_run=True, on_progress=progress)
            else:
                removed = await audited(
                    runner,
                    operator(),
                    "purge",
                    [],
                    lambda: actions.purge(runner, age, on_progress=progress),
                    lambda ids: Said("done", f"purged {len(ids)} finished run(s)", runs=ids),
                    detail={"older_than": args.older_than},
                )
        finally:
            progress.close()
        verb = "would purge" if args.dry_run else "purged"
        if args.json:
            emit_json({"older_than": age, "dry_run": args.dry_run, "ids": removed})
        else:
            if args.dry_run:
                for run_id in removed:
                    print(escape_controls(run_id))
            print(f"{verb} {len(removed)} finished run(s) older than {args.older_than}")
        return 0

    return asyncio.run(_with_runner(args, body))


class _Progress:
    """``purging 12/40`` on a terminal, rewritten in place; nothing on a pipe
    (the final summary says it all, and logs stay clean)."""

    def __init__(self, stream: TextIO, verb: str) -> None:
        self.stream = stream
        self.verb = verb
        self.live = stream.isatty()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if self.live and total:
            self.stream.write(f"\r{self.verb} {done}/{total}")
            self.stream.flush()
            self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def cmd_stats(args: argparse.Namespace) -> int:
    async def body(runner: JobRunner) -> int:
        counts = await listing.stats(runner)
        warn_unreadable(counts.unreadable)
        if args.json:
            emit_json(
                {
                    "queue": counts.queue,
                    "outcomes": counts.outcomes,
                    "unreadable": unreadable_json(counts.unreadable),
                }
            )
            return 0
        rows = [["queue", state, str(n)] for state, n in counts.queue.items()]
        rows += [["outcomes", state, str(n)] for state, n in counts.outcomes.items()]
        if counts.unreadable:
            rows.append(["outcomes", "unreadable", str(len(counts.unreadable))])
        table(sys.stdout, ["WHERE", "STATUS", "COUNT"], rows)
        return 0

    return asyncio.run(_with_runner(args, body))
