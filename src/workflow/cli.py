"""``stepstone``: run workers and look after jobs from a shell.

    stepstone worker APP:RUNNER [--concurrency N]
    stepstone ls [--status S] [--limit N]
    stepstone show ID
    stepstone retry ID
    stepstone cancel ID
    stepstone purge --older-than 7d [--dry-run]
    stepstone stats

Every command but ``worker`` reads the store named by ``--store URL`` (or
``STEPSTONE_STORE``) under ``--prefix`` (or ``STEPSTONE_PREFIX``), or the
store, queue and prefix of an application's runner with ``--app APP:RUNNER``.
Tables are for people; ``--json`` prints one JSON document for scripts.
A failure prints one line to stderr and exits 1 (2 for a usage mistake).

The commands need none of the application's job types: they read the
records the engine writes (see :mod:`workflow.inspection`), so an operator
can inspect a bucket from any machine that can reach it. docs/operations.md
is the reference.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import logging
import os
import re
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, TextIO

from stepstone.runtime.errors import QueueError
from stepstone.store import StoreError
from stepstone.store.errors import StoreConfigError

from .inspection import STATE_NAMES, Detail, InspectError, Listed
from .runner import JobRunner

log = logging.getLogger("stepstone.cli")

ENV_STORE = "STEPSTONE_STORE"
ENV_PREFIX = "STEPSTONE_PREFIX"

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")


class CliError(Exception):
    """A failure to report in one line, with the exit status to leave with."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``12h``, ``7d``, ``2w`` or a sum like ``1h30m``, in seconds."""
    compact = text.strip().lower().replace(" ", "")
    pos, total = 0, 0.0
    while pos < len(compact):
        match = _DURATION.match(compact, pos)
        if match is None:
            break
        total += float(match.group(1)) * _UNITS[match.group(2) or "s"]
        pos = match.end()
    if not compact or pos != len(compact):
        raise CliError(
            f"cannot read {text!r} as a duration (examples: 90s, 30m, 12h, 7d, 1h30m)", 2
        )
    return total


# -- loading an application's runner ---------------------------------------------


def load_target(spec: str) -> Any:
    """The object ``module:attr`` names (``attr`` may be dotted), importing
    ``module`` with the current directory on the path, as ``python -m`` would."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CliError(f"expected APP:RUNNER (a module and an attribute), got {spec!r}", 2)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        if getattr(exc, "name", None) and module_name.startswith(str(exc.name)):
            raise CliError(f"cannot import module {module_name!r}: {exc}") from exc
        raise  # the module exists but an import inside it failed: show the traceback
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise CliError(f"module {module_name!r} has no attribute {attr!r}") from None
    return target


async def resolve_runner(spec: str) -> JobRunner:
    """A JobRunner, or the result of calling a zero-argument factory (sync or async)."""
    target = load_target(spec)
    if not isinstance(target, JobRunner) and callable(target):
        try:
            inspect.signature(target).bind()
        except TypeError:
            raise CliError(
                f"{spec} is a callable that needs arguments; it must be a JobRunner "
                "or a zero-argument callable returning one"
            ) from None
        except ValueError:  # no signature to check (a builtin): just call it
            pass
        target = target()
        if inspect.isawaitable(target):
            target = await target
    if not isinstance(target, JobRunner):
        raise CliError(
            f"{spec} is a {type(target).__name__}, not a JobRunner "
            "(or a zero-argument callable returning one)"
        )
    return target


def _runner_from_args(args: argparse.Namespace) -> Callable[[], Awaitable[JobRunner]]:
    async def make() -> JobRunner:
        app = getattr(args, "app", None)
        if app:
            return await resolve_runner(app)
        url = getattr(args, "store", None) or os.environ.get(ENV_STORE)
        if not url:
            raise CliError(f"no store: pass --store URL or set {ENV_STORE}", 2)
        prefix = getattr(args, "prefix", None)
        if prefix is None:
            prefix = os.environ.get(ENV_PREFIX, "")
        if url.startswith("memory:"):
            raise CliError(
                "a memory:// store lives inside one process; point the CLI at a "
                "directory, file:// or s3:// store"
            )
        _check_directory(url)
        try:
            return JobRunner(url, prefix=prefix)
        except StoreConfigError as exc:
            raise CliError(str(exc)) from None

    return make


def _check_directory(url: str) -> None:
    """Refuse a local store that does not exist: FileStore would create it, and a
    typo in a path would then list an empty store instead of failing."""
    if "://" not in url or url.startswith("file://"):
        path = Path(url.removeprefix("file://")).expanduser()
        if not path.is_dir():
            raise CliError(f"no store at {str(path)!r}: the directory does not exist")


# -- output ------------------------------------------------------------------------


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _short(value: Any, width: int = 200) -> str:
    text = value if isinstance(value, str) else _json(value)
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 3] + "..."


def _json(value: Any, **kwargs: Any) -> str:
    def default(obj: object) -> object:
        if isinstance(obj, bytes):
            return f"<{len(obj)} bytes>"
        return str(obj)

    return json.dumps(value, default=default, ensure_ascii=False, **kwargs)


def _table(out: TextIO, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    for row in (headers, *rows):
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=True)]
        out.write("  ".join(cells).rstrip() + "\n")


def _listed_json(row: Listed) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "state": row.state,
        "attempts": row.attempts,
        "updated": row.updated,
        "source": row.source,
        "last_error": row.last_error,
    }


def _detail_json(found: Detail) -> dict[str, Any]:
    queued = found.queued
    outcome = found.outcome
    return {
        "id": found.id,
        "name": found.name,
        "state": found.state,
        "input": found.input,
        "queue": None
        if queued is None
        else {
            "status": queued.status.value,
            "kind": queued.kind,
            "priority": queued.priority,
            "attempts": queued.attempts,
            "max_attempts": queued.max_attempts,
            "run_at": queued.run_at,
            "created_at": queued.created_at,
            "updated_at": queued.updated_at,
            "lease_expires_at": queued.lease_expires_at,
            "last_error": queued.last_error,
            "dead_reason": queued.dead_reason,
            "headers": dict(queued.headers),
        },
        "outcome": None
        if outcome is None
        else {
            "status": outcome.status.value,
            "attempts": outcome.attempts,
            "finished_at": outcome.finished_at,
            "result": _decoded(outcome.result),
            "error": None
            if outcome.error is None
            else {
                "kind": outcome.error.kind,
                "message": outcome.error.message,
                "type": outcome.error.error_type,
            },
        },
        "progress": found.progress,
        "incarnation": found.incarnation,
        "memos": [
            {
                "step": memo.step,
                "key": memo.step_key,
                "incarnation": memo.incarnation,
                "current": memo.incarnation == found.incarnation,
                "size": memo.size,
                "recorded_at": memo.modified,
                "value": memo.value,
            }
            for memo in found.memos
        ],
    }


def _decoded(data: bytes | None) -> Any:
    from .inspection import decode_value

    return decode_value(data)


def _print_detail(out: TextIO, found: Detail) -> None:
    def line(label: str, value: object, indent: str = "  ") -> None:
        out.write(f"{indent}{label:<12} {value}\n")

    out.write(f"job {found.id}\n")
    line("state", found.state)
    line("name", found.name or "-")
    if found.input is not None:
        line("input", _short(found.input))
    line("progress", "-" if found.progress is None else _short(found.progress))
    queued = found.queued
    if queued is None:
        out.write("queue: no record (finished, cancelled, or never enqueued)\n")
    else:
        out.write("queue:\n")
        line("status", queued.status.value)
        line("attempts", f"{queued.attempts} of {queued.max_attempts}")
        line("priority", queued.priority)
        line("run at", _when(queued.run_at))
        line("created", _when(queued.created_at))
        line("updated", _when(queued.updated_at))
        if queued.lease_expires_at is not None:
            line("lease until", _when(queued.lease_expires_at))
        if queued.last_error:
            line("last error", _short(queued.last_error))
        if queued.dead_reason:
            line("dead reason", _short(queued.dead_reason))
        if queued.headers:
            line("headers", _short(dict(queued.headers)))
    outcome = found.outcome
    if outcome is None:
        out.write("outcome: none yet\n")
    else:
        out.write("outcome:\n")
        line("status", outcome.status.value)
        line("attempts", outcome.attempts)
        line("finished", _when(outcome.finished_at))
        if outcome.error is not None:
            line("error", f"{outcome.error.kind}: {_short(outcome.error.message)}")
            if outcome.error.error_type:
                line("error type", outcome.error.error_type)
        if outcome.result is not None:
            line("result", _short(_decoded(outcome.result)))
    if not found.memos:
        out.write("memos: none\n")
        return
    by_incarnation: dict[str, list[Any]] = {}
    for memo in found.memos:
        by_incarnation.setdefault(memo.incarnation, []).append(memo)
    for incarnation, memos in by_incarnation.items():
        which = "current" if incarnation == found.incarnation else "an earlier run"
        out.write(f"memos ({len(memos)}, incarnation {incarnation}, {which}):\n")
        width = max(len(m.step) for m in memos)
        for memo in memos:
            value = "<undecodable>" if memo.undecodable else _short(memo.value, 120)
            out.write(f"  {memo.step:<{width}}  {value}\n")


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


# -- commands ------------------------------------------------------------------------


async def _with_runner(
    args: argparse.Namespace, body: Callable[[JobRunner], Awaitable[int]]
) -> int:
    runner = await _runner_from_args(args)()
    try:
        return await body(runner)
    finally:
        await runner.close()


def cmd_ls(args: argparse.Namespace) -> int:
    from . import inspection

    async def body(runner: JobRunner) -> int:
        rows = await inspection.list_jobs(runner, args.status, limit=args.limit)
        if args.json:
            _emit_json({"jobs": [_listed_json(r) for r in rows]})
            return 0
        out = sys.stdout
        if rows:
            _table(
                out,
                ["ID", "STATE", "NAME", "ATTEMPTS", "UPDATED", "SOURCE", "LAST ERROR"],
                [
                    [
                        r.id,
                        r.state,
                        r.name,
                        str(r.attempts),
                        _when(r.updated),
                        r.source,
                        _short(r.last_error or "", 60),
                    ]
                    for r in rows
                ],
            )
        where = _sources(args.status)
        more = " (--limit reached)" if len(rows) >= args.limit else ""
        out.write(f"{len(rows)} job(s) from {where}{more}\n")
        return 0

    return asyncio.run(_with_runner(args, body))


def _sources(status: str | None) -> str:
    from .inspection import OUTCOME_STATES

    if status is None:
        return "the queue and outcomes/"
    if status in OUTCOME_STATES:
        return "outcomes/ (finished runs)"
    return "the queue"


def cmd_show(args: argparse.Namespace) -> int:
    from . import inspection

    async def body(runner: JobRunner) -> int:
        found = await inspection.detail(runner, args.id)
        if args.json:
            _emit_json(_detail_json(found))
        else:
            _print_detail(sys.stdout, found)
        return 0

    return asyncio.run(_with_runner(args, body))


def cmd_retry(args: argparse.Namespace) -> int:
    from . import inspection

    async def body(runner: JobRunner) -> int:
        await inspection.retry(runner, args.id)
        if args.json:
            _emit_json({"id": args.id, "requeued": True})
        else:
            print(f"requeued {args.id} (its failed outcome was removed; finished steps replay)")
        return 0

    return asyncio.run(_with_runner(args, body))


def cmd_cancel(args: argparse.Namespace) -> int:
    from . import inspection

    async def body(runner: JobRunner) -> int:
        done = await inspection.cancel(runner, args.id)
        if args.json:
            _emit_json({"id": args.id, "result": done})
        elif done == "cancelled":
            print(f"cancelled {args.id}")
        else:
            print(f"discarded dead job {args.id} from the queue (its failed outcome stays)")
        return 0

    return asyncio.run(_with_runner(args, body))


def cmd_purge(args: argparse.Namespace) -> int:
    from . import inspection

    age = parse_duration(args.older_than)

    async def body(runner: JobRunner) -> int:
        progress = _Progress(sys.stderr, "checking" if args.dry_run else "purging")
        try:
            removed = await inspection.purge(
                runner, age, dry_run=args.dry_run, on_progress=progress
            )
        finally:
            progress.close()
        verb = "would purge" if args.dry_run else "purged"
        if args.json:
            _emit_json({"older_than": age, "dry_run": args.dry_run, "ids": removed})
        else:
            if args.dry_run:
                for run_id in removed:
                    print(run_id)
            print(f"{verb} {len(removed)} finished run(s) older than {args.older_than}")
        return 0

    return asyncio.run(_with_runner(args, body))


def cmd_stats(args: argparse.Namespace) -> int:
    from . import inspection

    async def body(runner: JobRunner) -> int:
        counts = await inspection.stats(runner)
        if args.json:
            _emit_json(counts)
            return 0
        rows = [["queue", state, str(n)] for state, n in counts["queue"].items()]
        rows += [["outcomes", state, str(n)] for state, n in counts["outcomes"].items()]
        _table(sys.stdout, ["WHERE", "STATUS", "COUNT"], rows)
        return 0

    return asyncio.run(_with_runner(args, body))


def cmd_worker(args: argparse.Namespace) -> int:
    from .observability import configure_logging

    root = logging.getLogger()
    level = root.level
    handler = configure_logging(args.log_level, json_lines=args.log_format == "json")
    try:
        return asyncio.run(_serve(args))
    finally:  # as it was: main() is also called in-process (tests, embedding)
        root.removeHandler(handler)
        root.setLevel(level)


async def _serve(args: argparse.Namespace) -> int:
    """Run the runner until SIGTERM or SIGINT, then drain.

    The first signal stops claiming and lets in-flight jobs finish within the
    runner's drain window (what is cut short goes back to the queue, its
    attempt not counted). A second signal exits at once, as a crash would:
    the leases of jobs still running expire and another worker takes them.
    """
    runner = await resolve_runner(args.app)
    if args.concurrency is not None:
        if args.concurrency < 1:
            raise CliError("--concurrency must be at least 1", 2)
        runner.worker.concurrency = args.concurrency
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig.name)
        if len(received) == 1:
            log.info("%s received: draining in-flight jobs (send again to exit at once)", sig.name)
            stop.set()
        else:
            log.warning("%s received again: exiting without draining", sig.name)
            os._exit(128 + sig.value)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        async with runner:
            log.info(
                "worker running %s on %s (concurrency %d); SIGTERM or Ctrl-C drains",
                args.app,
                runner.store.location,
                runner.worker.concurrency,
            )
            await stop.wait()
        log.info("worker drained and stopped")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await runner.close()
    return 0


# -- the parser ------------------------------------------------------------------------


def _emit_json(value: Any) -> None:
    sys.stdout.write(_json(value, indent=2) + "\n")


def build_parser() -> argparse.ArgumentParser:
    # Shared options are accepted before or after the command; SUPPRESS keeps a
    # subcommand's unset option from overwriting one given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store",
        default=argparse.SUPPRESS,
        metavar="URL",
        help=f"the store: a directory, file:///path or s3://bucket/prefix (default ${ENV_STORE})",
    )
    common.add_argument(
        "--prefix",
        default=argparse.SUPPRESS,
        help=f"the runner's key prefix inside the store (default ${ENV_PREFIX} or none)",
    )
    common.add_argument(
        "--app",
        default=argparse.SUPPRESS,
        metavar="APP:RUNNER",
        help="take the store, queue and prefix from this runner instead of --store",
    )
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts"
    )

    parser = argparse.ArgumentParser(
        prog="stepstone",
        description="Run stepstone workers and inspect, retry, cancel and purge jobs.",
        parents=[common],
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    worker = sub.add_parser(
        "worker",
        help="run a JobRunner's worker until SIGTERM/SIGINT, then drain",
        description="Import APP and run its RUNNER (a JobRunner, or a zero-argument "
        "callable returning one) until SIGTERM or SIGINT, which drain gracefully.",
    )
    worker.add_argument("app", metavar="APP:RUNNER", help="e.g. myapp.jobs:runner")
    worker.add_argument("--concurrency", type=int, help="override the runner's concurrency")
    worker.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="default INFO",
    )
    worker.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="text lines, or one JSON object per line (default text)",
    )
    worker.set_defaults(handler=cmd_worker)

    ls = sub.add_parser(
        "ls",
        parents=[common],
        help="list jobs from the queue and/or outcomes",
        description="List jobs. A queue state (scheduled, ready, running, dead) lists "
        "queue records; succeeded, failed or cancelled lists finished runs from "
        "outcomes/; no --status lists both, one row per id.",
    )
    ls.add_argument("--status", choices=STATE_NAMES, help="only jobs in this state")
    ls.add_argument("--limit", type=int, default=100, help="at most this many rows (default 100)")
    ls.set_defaults(handler=cmd_ls)

    show = sub.add_parser(
        "show",
        parents=[common],
        help="one job: queue record, outcome, progress, memos",
        description="Show everything stored about one job.",
    )
    show.add_argument("id", help="the job id")
    show.set_defaults(handler=cmd_show)

    retry = sub.add_parser(
        "retry",
        parents=[common],
        help="requeue a dead job (its failed outcome is removed first)",
        description="Requeue a dead job with its attempts reset. Its failed outcome "
        "record is removed first so the new run can record its own; steps it "
        "finished replay from their memos.",
    )
    retry.add_argument("id", help="the job id")
    retry.set_defaults(handler=cmd_retry)

    cancel = sub.add_parser(
        "cancel",
        parents=[common],
        help="cancel a job that has not finished (or discard a dead one)",
    )
    cancel.add_argument("id", help="the job id")
    cancel.set_defaults(handler=cmd_cancel)

    purge = sub.add_parser(
        "purge",
        parents=[common],
        help="remove finished runs older than a given age",
        description="Remove the outcome, memos and progress of every finished run "
        "whose outcome is older than --older-than.",
    )
    purge.add_argument(
        "--older-than", required=True, metavar="AGE", help="e.g. 30m, 12h, 7d, 1h30m"
    )
    purge.add_argument("--dry-run", action="store_true", help="list what would go; remove nothing")
    purge.set_defaults(handler=cmd_purge)

    stats = sub.add_parser(
        "stats",
        parents=[common],
        help="counts by status, in the queue and in outcomes/",
        description="Count queue records by status and outcome records by status "
        "(one GET per outcome).",
    )
    stats.set_defaults(handler=cmd_stats)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The ``stepstone`` entry point; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "json"):
        args.json = False
    try:
        status: int = args.handler(args)
        return status
    except CliError as exc:
        return _fail(str(exc), exc.status)
    except InspectError as exc:
        return _fail(str(exc))
    except StoreError as exc:
        return _fail(str(exc))
    except QueueError as exc:  # e.g. SqsUnsupported: `show` of a job SQS cannot look up
        return _fail(str(exc))
    except KeyboardInterrupt:
        return _fail("interrupted", 130)


def _fail(message: str, status: int = 1) -> int:
    sys.stderr.write(f"stepstone: error: {message}\n")
    return status


def run() -> NoReturn:
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    run()
