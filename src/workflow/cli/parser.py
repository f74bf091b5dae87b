"""The command line: the commands, their options, and the handler each one runs.

The shared options (``--store``, ``--prefix``, ``--app``, ``--json``) are
accepted before or after every command, ``worker`` and ``ui`` included, so
``stepstone --json ls`` and ``stepstone ls --json`` both work: one parser
holds them and is a parent of the top level and of every command, its
defaults suppressed so a command's copy cannot overwrite a value given before
the command.
"""

from __future__ import annotations

import argparse

from stepstone.cli.audit import cmd_audit
from stepstone.cli.check_store import cmd_check_store
from stepstone.cli.commands import (
    cmd_cancel,
    cmd_history,
    cmd_ls,
    cmd_purge,
    cmd_replay,
    cmd_retry,
    cmd_send_event,
    cmd_show,
    cmd_stats,
)
from stepstone.cli.copy import cmd_copy
from stepstone.cli.fleet import cmd_schedules, cmd_workers
from stepstone.cli.runners import ENV_PREFIX, ENV_STORE
from stepstone.cli.schedule_actions import (
    cmd_schedules_backfill,
    cmd_schedules_pause,
    cmd_schedules_resume,
)
from stepstone.cli.talk import cmd_callback_complete, cmd_stream
from stepstone.cli.ui import USERS_ENV, cmd_ui, cmd_ui_user
from stepstone.cli.worker import cmd_worker
from stepstone.records.audit import ACTIONS
from stepstone.runtime.status import JobStatus


def build_parser() -> argparse.ArgumentParser:
    # Shared options are accepted before or after the command; SUPPRESS keeps a
    # subcommand's unset option from overwriting one given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store",
        default=argparse.SUPPRESS,
        metavar="URL",
        help=f"the store: a SQLite file, a directory, or s3://bucket/prefix (default ${ENV_STORE})",
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
        "--codec",
        default=argparse.SUPPRESS,
        metavar="CODECS",
        help="the payload codecs, by comma: zstd, zlib, aes-gcm, MODULE:ATTR (default "
        "$STEPSTONE_CODEC); aes-gcm's keys come from $STEPSTONE_KEYS or $STEPSTONE_KEYS_FILE, "
        "never from the command line",
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
        parents=[common],
        help="run a JobRunner's worker until SIGTERM/SIGINT, then drain",
        description="Import APP and run its RUNNER (a JobRunner, or a zero-argument "
        "callable returning one) until SIGTERM or SIGINT, which drain gracefully. "
        "APP:RUNNER may be given as --app, before or after the command.",
    )
    worker.add_argument(
        "target",
        nargs="?",
        metavar="APP:RUNNER",
        help="e.g. myapp.jobs:runner (or --app APP:RUNNER)",
    )
    worker.add_argument("--concurrency", type=int, help="override the runner's concurrency")
    worker.add_argument(
        "--build-id",
        metavar="ID",
        help="the code this worker runs (a release tag, a commit), recorded with each call "
        "it records: a run it cannot replay because another build advanced it waits for a "
        "worker of that build (default: $STEPSTONE_BUILD_ID, else each job type's VERSION, "
        "else a digest of its source)",
    )
    worker.add_argument(
        "--worker-id",
        metavar="ID",
        help="the worker's id, kept across restarts: started again under it on the same "
        "host, the worker takes back at once the runs it held when it was killed "
        "(default: the host's name, or the next free one on this host)",
    )
    worker.add_argument(
        "--seal-errors",
        action="store_true",
        help="seal the text of every error the worker writes (messages, tracebacks) with "
        "the payload codecs, as payloads are (default $STEPSTONE_SEAL_ERRORS; "
        "docs/security.md)",
    )
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
    worker.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve metrics in the Prometheus text format on http://HOST:PORT/metrics "
        "(needs the metrics extra)",
    )
    worker.add_argument(
        "--metrics-host",
        default="0.0.0.0",
        metavar="HOST",
        help="the address --metrics-port listens on (default 0.0.0.0, every interface)",
    )
    worker.set_defaults(handler=cmd_worker)

    ls = sub.add_parser(
        "ls",
        parents=[common],
        help="list jobs from the queue and/or outcomes",
        description="List jobs, newest first by when they were submitted. A queue state "
        "(scheduled, ready, running, dead, ...) lists queue records; succeeded, failed or "
        "cancelled lists finished runs from outcomes/; no --status lists both, one row "
        "per id. ID is the start of the id, which `show` takes.",
    )
    ls.add_argument(
        "--status", choices=[s.value for s in JobStatus], help="only runs in this status"
    )
    _choosing(ls)
    ls.add_argument(
        "--attr",
        action="append",
        metavar="NAME=VALUE",
        help="only runs with this attribute (SubmitOptions(attributes=...), "
        "ctx.set_attributes); again for each one they must all have. Found through the "
        "index of attributes: what it reads grows with the runs that match",
    )
    ls.add_argument(
        "--limit", type=int, default=100, help="the newest this many rows (default 100)"
    )
    ls.add_argument(
        "--patch",
        metavar="CHANGE_ID",
        help="the runs not finished that may still take the old path of ctx.patched(CHANGE_ID) "
        "(they took it, or have not reached it): none left means deprecate_patch is safe",
    )
    ls.set_defaults(handler=cmd_ls)

    show = sub.add_parser(
        "show",
        parents=[common],
        help="one job: queue record, outcome, attempts, steps",
        description="Show everything stored about one job, by its id, a unique "
        "start of its id (4 or more digits), or --key, the idempotency key it was "
        "submitted with.",
    )
    _naming_a_run(show)
    show.set_defaults(handler=cmd_show)

    history = sub.add_parser(
        "history",
        parents=[common],
        help="one run's attempts: each claim, who ran it, how it ended",
        description="List each claim of one run, by its id, a unique start of its id, or "
        "--key: when, how long, how it ended, by which worker, and its error (the "
        "attempts part of `show`).",
    )
    _naming_a_run(history)
    history.set_defaults(handler=cmd_history)

    event = sub.add_parser(
        "send-event",
        parents=[common],
        help="send an event to a live run, for its ctx.wait_for_event(NAME)",
        description="Send event NAME with a JSON payload to a run that has not finished, "
        "named by its id, a unique start of its id, or --key: its ctx.wait_for_event(NAME) "
        "takes it, now or when it gets there. Refused, saying why, for a run that has "
        "finished or was never submitted.",
    )
    _naming_a_run(event)
    event.add_argument("name", metavar="NAME", help="the event's name")
    event.add_argument(
        "--payload",
        metavar="JSON",
        help="the event's payload, as JSON (default: none, which the wait takes as None)",
    )
    event.add_argument(
        "--event-key",
        metavar="KEY",
        help="make the send idempotent: a send of NAME with a KEY already sent is that "
        "event, not another (a webhook's delivery id)",
    )
    event.set_defaults(handler=cmd_send_event)

    stream = sub.add_parser(
        "stream",
        parents=[common],
        help="print the items of a run's stream (--follow: as it writes them)",
        description="Print the items a run wrote to its stream NAME (ctx.stream(NAME)), one a "
        "line: a string as itself, any other value as JSON, control characters escaped; with "
        "--json one JSON object a line, {offset, value}. Without --follow it prints what is "
        "written and stops; with it, it waits for more until the run closes the stream or ends.",
    )
    stream.add_argument("id", nargs="?", help="the run id, or a unique start of it")
    stream.add_argument("name", help="the stream's name")
    stream.add_argument(
        "--key", metavar="IDEMPOTENCY_KEY", help="the run submitted with this key (not an id)"
    )
    stream.add_argument(
        "--follow", "-f", action="store_true", help="wait for more until the stream or run ends"
    )
    stream.add_argument(
        "--from",
        dest="start",
        type=int,
        default=0,
        metavar="OFFSET",
        help="start at this item (0, the first, by default)",
    )
    stream.set_defaults(handler=cmd_stream)

    callback = sub.add_parser(
        "callback",
        parents=[common],
        help="complete a callback a run waits for",
        description="Act on a callback a run made (ctx.callback).",
    )
    callback_sub = callback.add_subparsers(dest="callback_command", metavar="ACTION", required=True)
    complete = callback_sub.add_parser(
        "complete",
        parents=[common],
        help="complete a callback with a JSON value, as runner.complete_callback does",
        description="Complete the callback ID (cb.id in the run) with VALUE and wake its run. "
        "VALUE is JSON text, @PATH a file of it, or - for standard input. The first "
        "completion wins: a callback completed already exits 1, saying so; one that cannot "
        "take a completion (expired, its run ended, no such callback) is an error. Recorded "
        "in the audit log.",
    )
    complete.add_argument("id", help="the callback's id")
    complete.add_argument("value", metavar="VALUE", help="JSON text, @PATH, or -")
    complete.set_defaults(handler=cmd_callback_complete)

    retry = sub.add_parser(
        "retry",
        parents=[common],
        help="requeue a dead run, or every dead run the filters choose",
        description="Requeue a dead run (by its id, a unique start of it, or --key) with "
        "its attempts reset. Its failed outcome "
        "record is removed first so the new run can record its own; steps it "
        "finished replay from their memos. With filters (--status dead, --kind, --since, "
        "--version, --key-prefix) instead of an id, every dead run they choose, after "
        "saying how many and asking (--yes for scripts); exit 1 if some could not be.",
    )
    _naming_a_run(retry)
    retry.add_argument(
        "--status", choices=[JobStatus.DEAD.value], help="dead: the only runs a retry takes"
    )
    _choosing(retry)
    _confirming(retry)
    retry.set_defaults(handler=cmd_retry)

    cancel = sub.add_parser(
        "cancel",
        parents=[common],
        help="cancel a run that has not finished (or discard a dead one), or every one chosen",
        description="Cancel a run that has not finished (by its id, a unique start of it, "
        "or --key): its outcome is recorded "
        "cancelled and its queue record goes, and the children it created that have not "
        "finished are cancelled with it (--leave-children leaves them running); a dead "
        "run is discarded from the queue. "
        "With filters (--status, --kind, --since, --version, --key-prefix) instead of an "
        "id, every run they choose (without --status, every live one), after saying how "
        "many and asking (--yes for scripts); exit 1 if some could not be.",
    )
    _naming_a_run(cancel)
    cancel.add_argument(
        "--leave-children",
        action="store_true",
        help="cancel only the run: its children go on",
    )
    cancel.add_argument(
        "--status",
        choices=[s.value for s in JobStatus if not s.finished],
        help="only runs in this status",
    )
    _choosing(cancel)
    _confirming(cancel)
    cancel.set_defaults(handler=cmd_cancel)

    replay = sub.add_parser(
        "replay",
        parents=[common],
        help="run an ended run again from a step, or every ended run the filters choose",
        description="Run an ended run (succeeded, failed, cancelled or dead; by its id, a "
        "unique start of it, or --key) again as a new incarnation with the same input: "
        "the steps before --from-step replay from their memos, and that step and all "
        "after it run again (without --from-step, all of them). The old incarnation's "
        "memos and attempts stay, linked from the new one. "
        "A live run is refused. With filters (--status, --kind, --since, --version, "
        "--key-prefix) instead of an id, every ended run they choose, after saying how "
        "many and asking (--yes for scripts); exit 1 if some could not be.",
    )
    _naming_a_run(replay)
    replay.add_argument(
        "--from-step", metavar="STEP", help="the step to run from (its first call in the run)"
    )
    replay.add_argument(
        "--status",
        choices=[s.value for s in JobStatus if s.finished or s is JobStatus.DEAD],
        help="only runs in this status",
    )
    _choosing(replay)
    _confirming(replay)
    replay.set_defaults(handler=cmd_replay)

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

    schedules = sub.add_parser(
        "schedules",
        parents=[common],
        help="the schedules, their last tick and run, and their next ticks",
        description="List the schedules whose markers the store holds, and with --app "
        "the runner's too: each with how it ticks, its missed-tick policy, the last tick "
        "submitted (by any process) and the run it started, and its next ticks (overdue "
        "when no process submitted the next one). Without --app, how each ticks is what "
        "its marker says.",
    )
    schedules.add_argument(
        "--count", type=int, default=3, help="next ticks to show per schedule (default 3)"
    )
    schedules.set_defaults(handler=cmd_schedules)
    _schedule_actions(schedules, common)

    workers = sub.add_parser(
        "workers",
        parents=[common],
        help="the workers, one line each: live, gone (missed beats) or stopped",
        description="List the workers from the records they keep in the store: each "
        "one's id, state, host, pid, runs held of its capacity, when it was last seen and "
        "the runs it holds. Live ones first, then those gone (no beat for three of their "
        "beats) and those stopped within the last day.",
    )
    workers.set_defaults(handler=cmd_workers)

    ui = sub.add_parser(
        "ui",
        parents=[common],
        help="a web view of the runs, in the browser",
        description="Serve a web page listing the store's runs (newest first; filter by "
        "state, job type, age, version and key), a page per run (input, steps, attempts, "
        "outcome, audit) and the queue's counts, refreshing live. Reads only unless "
        "--allow-actions. On this machine only it needs no sign-in; to share it, give it "
        "--users FILE (stepstone ui-user adds users) or a proxy that signs users in "
        "(--trusted-proxy, --user-header). Needs the ui extra.",
    )
    ui.add_argument(
        "store_url", nargs="?", metavar="STORE_URL", help="the store (or --store, --app)"
    )
    ui.add_argument("--port", type=int, default=8765, help="default 8765; 0 picks a free one")
    ui.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on (default 127.0.0.1: this machine only)",
    )
    ui.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="answer requests addressed to this host name too (a proxy's; *.example.com "
        "for its subdomains); by default only localhost names and the --host address",
    )
    ui.add_argument(
        "--allow-actions",
        action="store_true",
        help="let the pages retry, cancel, replay and send events to runs (each confirmed "
        "and recorded in the audit log): with sign-in, operators may; without, anyone "
        "who can reach the view (then this machine only)",
    )
    ui.add_argument(
        "--users",
        metavar="FILE",
        help=f"sign-in with the users of FILE (name:role:hash lines; default ${USERS_ENV}; "
        "stepstone ui-user adds one)",
    )
    ui.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        metavar="ADDRESS",
        help="a proxy's IP address or network (10.0.0.0/8), repeatable: from it alone, "
        "X-Forwarded-For, X-Forwarded-Proto and --user-header are believed",
    )
    ui.add_argument(
        "--user-header",
        metavar="NAME",
        help="the header in which a --trusted-proxy names the user it signed in "
        "(X-Forwarded-User, X-Auth-Request-User, Remote-User, ...); the role is the "
        "users file's, or viewer",
    )
    ui.add_argument(
        "--no-sign-in",
        action="store_true",
        help="serve other machines (--host) with no sign-in, read-only: anyone who "
        "reaches the view reads every run",
    )
    ui.add_argument(
        "--refresh",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="pages refresh themselves this often (default 5; 0: never)",
    )
    ui.set_defaults(handler=cmd_ui)

    ui_user = sub.add_parser(
        "ui-user",
        help="add a user to the web view's users file, or change or remove one",
        description="Add NAME to the users file with a role and a password (asked twice "
        "at a terminal, else read from the first line of stdin), kept as a scrypt hash; "
        "update the user if listed. Without --users (or $STEPSTONE_UI_USERS), print "
        "the line instead.",
    )
    ui_user.add_argument("name", metavar="NAME", help="the user's name (an e-mail address fits)")
    ui_user.add_argument("--role", choices=["viewer", "operator"], help="what the user may do")
    ui_user.add_argument("--users", metavar="FILE", help=f"the users file (default ${USERS_ENV})")
    ui_user.add_argument(
        "--no-password",
        action="store_true",
        help="no password: the user signs in only through a trusted proxy (--user-header)",
    )
    ui_user.add_argument("--remove", action="store_true", help="remove the user instead")
    ui_user.set_defaults(handler=cmd_ui_user)

    audit = sub.add_parser(
        "audit",
        parents=[common],
        help="the operators' actions, newest first: who, when, from where, what",
        description="List the audit records of the actions taken in the web view and with "
        "retry, cancel, replay and purge: when, who (a signed-in user, or user@host for "
        "the CLI), from which address, the action, its runs and how it ended. Kept for "
        "the workers' audit_retention (90 days by default).",
    )
    audit.add_argument("--run", metavar="ID", help="only actions on this run (an id or its start)")
    audit.add_argument(
        "--key", metavar="IDEMPOTENCY_KEY", help="only actions on the run of this key"
    )
    audit.add_argument(
        "--since",
        metavar="WHEN",
        help="only actions begun since: a duration ago (10m, 2h, 3d) or an ISO time",
    )
    audit.add_argument(
        "--user", metavar="NAME", help="only this user's (NAME matches NAME@host too)"
    )
    audit.add_argument("--action", choices=ACTIONS, help="only this action")
    audit.add_argument("--limit", type=int, default=100, help="the newest this many (default 100)")
    audit.set_defaults(handler=cmd_audit)

    check = sub.add_parser(
        "check-store",
        parents=[common],
        help="check that a store holds what stepstone needs, before trusting it",
        description="Try each property the engine rests on (create-if-absent among "
        "concurrent creators, compare-and-swap, If-Match on a missing key, conditional "
        "delete, list-after-write, read-after-overwrite, large objects) in a scratch "
        "prefix it removes afterwards, and measure each operation's latency. One line "
        "per property; exit 1, saying what to do, when one does not hold.",
    )
    check.add_argument("store_url", nargs="?", metavar="STORE_URL", help="the store (or --store)")
    check.add_argument(
        "--large-mib",
        type=float,
        default=16.0,
        metavar="MIB",
        help="the size of the large object to write and read back (default 16)",
    )
    check.add_argument(
        "--samples", type=int, default=20, help="calls per operation timed (default 20)"
    )
    check.add_argument(
        "--time-limit",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="a property not answered within this fails (default 120)",
    )
    check.set_defaults(handler=cmd_check_store)

    copy = sub.add_parser(
        "copy",
        parents=[common],
        help="copy every object of one store into another (a bucket into a file, and back)",
        description="Put every object of SOURCE into DESTINATION, any two stores: a "
        "bucket's prefix into a SQLite file or a directory to inspect offline with ls, "
        "show and ui, and back. A DESTINATION that is a local path naming nothing is "
        "made: a SQLite file when its name ends in .db, .sqlite or .sqlite3, else a "
        "directory. Objects the destination holds already are replaced; the others "
        "there are left alone. Copy a store nobody writes to for a picture of one moment.",
    )
    copy.add_argument("source", metavar="SOURCE", help="the store to copy from (a URL or path)")
    copy.add_argument("destination", metavar="DESTINATION", help="the store to copy into")
    copy.add_argument(
        "--mark",
        action="store_true",
        help="mark the copy as one (stepstone-copy, under --prefix): no worker starts on it",
    )
    copy.set_defaults(handler=cmd_copy)
    return parser


def _naming_a_run(command: argparse.ArgumentParser) -> None:
    """How a command on one run is told which: its id (or a unique start of
    it), or the idempotency key it was submitted with."""
    command.add_argument("id", nargs="?", help="the run id, or a unique start of it")
    command.add_argument(
        "--key",
        metavar="IDEMPOTENCY_KEY",
        help="the run submitted with this idempotency key (instead of an id)",
    )


def _choosing(command: argparse.ArgumentParser) -> None:
    """The filters ``ls`` and the bulk actions share (``--status`` is each one's own)."""
    command.add_argument(
        "--kind", metavar="KIND", help="only runs of this kind (a job type's NAME)"
    )
    command.add_argument(
        "--since",
        metavar="WHEN",
        help="only runs submitted since: a duration ago (10m, 2h, 3d) or an ISO time "
        "(2026-01-31T12:00, UTC unless it says otherwise)",
    )
    command.add_argument(
        "--version", metavar="VERSION", help="only runs submitted under this Job.VERSION"
    )
    command.add_argument(
        "--key-prefix",
        metavar="PREFIX",
        help="only runs whose idempotency key starts with this",
    )


def _confirming(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--yes", action="store_true", help="do not ask for confirmation (needed without a terminal)"
    )


def _schedule_actions(schedules: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """``stepstone schedules pause|resume|backfill NAME`` (without one: the list)."""
    actions = schedules.add_subparsers(dest="schedule_command", metavar="ACTION")
    pause = actions.add_parser(
        "pause",
        parents=[common],
        help="pause a schedule, for every worker carrying it",
        description="Pause schedule NAME: the pause is kept in its marker in the store, so "
        "every worker carrying it skips its ticks (each skip saying so) until it is "
        "resumed. The ticks of the pause are not caught up on resume. Recorded in the "
        "audit log, with the note.",
    )
    pause.add_argument("name", metavar="NAME", help="the schedule's name")
    pause.add_argument("--note", help="why (shown by stepstone schedules and the web view)")
    pause.set_defaults(handler=cmd_schedules_pause)
    resume = actions.add_parser(
        "resume",
        parents=[common],
        help="resume a paused schedule",
        description="Resume schedule NAME: its next tick runs; the ticks that came while it "
        "was paused do not. Recorded in the audit log.",
    )
    resume.add_argument("name", metavar="NAME", help="the schedule's name")
    resume.set_defaults(handler=cmd_schedules_resume)
    backfill = actions.add_parser(
        "backfill",
        parents=[common],
        help="run the past ticks of a range that have no run",
        description="Submit the run of each tick of schedule NAME from --from to --to (both "
        "included, both past) that has none: a tick the scheduler ran, or an earlier "
        "backfill did, is not run again, so a backfill run twice submits nothing more. The "
        "ticks run whatever the schedule's overlap policy and whether it is paused. Needs "
        "--app (each tick's job is made by the schedule's definition); at most 1000 ticks "
        "at a time. Recorded in the audit log with the runs it submitted.",
    )
    backfill.add_argument("name", metavar="NAME", help="the schedule's name")
    backfill.add_argument(
        "--from",
        dest="start",
        required=True,
        metavar="WHEN",
        help="the first time: a duration ago (2h, 3d) or an ISO 8601 time (UTC unless it says)",
    )
    backfill.add_argument(
        "--to", dest="end", metavar="WHEN", help="the last time, the same way (default: now)"
    )
    backfill.set_defaults(handler=cmd_schedules_backfill)
