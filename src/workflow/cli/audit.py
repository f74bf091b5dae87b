"""``stepstone audit``: the operators' actions, newest first; and who the CLI acts as.

Every ``retry``, ``cancel``, ``replay`` and ``purge`` run from the command
line, and every action taken in the web view, leaves an audit record
(:mod:`stepstone.records.audit_log`). The command lists them, filtered by
run (``--run``, ``--key``), age (``--since``), user (``--user``) and action
(``--action``), as a table or ``--json``. Names, addresses and result lines
are text others wrote (a user name a proxy passed, an event's name): the
table escapes their control characters, as every table of the CLI does.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import socket
import sys
from typing import Any

from stepstone.cli.durations import parse_since
from stepstone.cli.errors import CliError
from stepstone.cli.notices import warn
from stepstone.cli.render import age, emit_json, short, table, when
from stepstone.cli.runners import runner_from_args
from stepstone.errors import InspectError
from stepstone.ops import run_ids
from stepstone.records.audit import Actor, AuditRecord
from stepstone.records.audit_log import AuditLog, Found
from stepstone.records.layout import run_id_for_key
from stepstone.runner import JobRunner
from stepstone.runtime.run_id import is_storable_id


def operator() -> Actor:
    """Who a command acts as: the operating system's user at this host."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no name for this uid (a bare container)
        user = f"uid-{os.getuid()}"
    return Actor(f"{user}@{socket.gethostname()}", "cli", "os")


def cmd_audit(args: argparse.Namespace) -> int:
    if args.run is not None and args.key is not None:
        raise CliError("audit takes --run or --key, not both", 2)
    if args.limit < 1:
        raise CliError(f"--limit must be at least 1, got {args.limit}", 2)

    async def body(runner: JobRunner) -> int:
        now = runner.clock.now()
        since = None if args.since is None else parse_since(args.since, now)

        def keep(record: AuditRecord) -> bool:
            name = record.actor.name
            return (
                (since is None or record.at >= since)
                and (args.user is None or args.user in (name, name.rsplit("@", 1)[0]))
                and (args.action is None or record.action == args.action)
            )

        journal = AuditLog(runner.store, runner.layout, runner.clock)
        run_id = await _run_of(runner, args)
        if run_id is not None:
            found = await journal.of_run(run_id, limit=args.limit, keep=keep)
        else:
            found = await journal.listed(since=since, limit=args.limit, keep=keep)
        for bad in found.unreadable:
            warn(f"cannot read {bad.key}: {bad.reason}")
        if args.json:
            emit_json(
                {
                    "records": [record_json(record) for record in found.records],
                    "unreadable": [{"key": b.key, "reason": b.reason} for b in found.unreadable],
                }
            )
            return 0
        _print(found, now)
        return 0

    async def opened() -> int:
        runner = await runner_from_args(args)
        try:
            return await body(runner)
        finally:
            await runner.close()

    return asyncio.run(opened())


async def _run_of(runner: JobRunner, args: argparse.Namespace) -> str | None:
    """The run ``--run`` or ``--key`` names: a run's id or the start of one
    (a run swept since keeps its audit records: its full id finds them)."""
    if args.key is not None:
        return run_id_for_key(args.key)
    if args.run is None:
        return None
    try:
        return await run_ids.resolve_id(runner, args.run)
    except InspectError:
        if is_storable_id(args.run) and len(args.run) >= 32:
            return str(args.run)
        raise


def record_json(record: AuditRecord) -> dict[str, Any]:
    actor = record.actor
    return {
        "id": record.id,
        "at": record.at,
        "who": actor.name,
        "via": actor.via,
        "sign_in": actor.sign_in,
        "role": actor.role,
        "address": actor.address,
        "action": record.action,
        "runs": list(record.runs),
        "count": record.count,
        "detail": dict(record.detail),
        "outcome": record.outcome,
        "ended": record.ended,
        "result": record.result,
        "refused": dict(record.refused),
    }


def _runs(record: AuditRecord) -> str:
    if record.count == 1 and record.runs:
        return record.runs[0][:12]
    return f"{record.count} runs"


def _print(found: Found, now: float) -> None:
    rows = [
        [
            when(record.at),
            short(record.actor.name, 32),
            record.actor.via,
            short(record.actor.address or "-", 40),
            record.action,
            _runs(record),
            record.outcome,
            short(_result(record, now), 80),
        ]
        for record in found.records
    ]
    if rows:
        headers = ["WHEN", "WHO", "VIA", "FROM", "ACTION", "RUNS", "OUTCOME", "RESULT"]
        table(sys.stdout, headers, rows)
    sys.stdout.write(f"{len(rows)} action(s), newest first\n")


def _result(record: AuditRecord, now: float) -> str:
    said = record.result
    if record.detail:
        said += " (" + ", ".join(f"{k} {v}" for k, v in record.detail.items()) + ")"
    if record.outcome == "started":
        said = f"no outcome recorded {age(now - record.at)} after it began"
    return said.strip()
