"""The fleet's commands. ``stepstone workers``: one line per worker, from
the records the workers keep (:mod:`stepstone.ops.workers`), as ``celery
inspect`` users expect: live ones first, then those gone (missed beats) and
those stopped within the last day. ``stepstone schedules``: one line per
schedule, from its marker and, with ``--app``, the application's definition
(:mod:`stepstone.ops.schedules`), as the schedules page shows them."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from stepstone.cli.errors import CliError
from stepstone.cli.render import (
    age,
    emit_json,
    short,
    table,
    unreadable_json,
    warn_unreadable,
    when,
)
from stepstone.cli.runners import runner_from_args
from stepstone.ops.schedules import ScheduleRow, read_schedules
from stepstone.ops.workers import Fleet, WorkerRow, read_workers
from stepstone.schedules import next_ticks

RUNS_SHOWN = 3
"""Run ids a line names (``--json`` has all the record lists)."""


def cmd_workers(args: argparse.Namespace) -> int:
    return asyncio.run(_workers(args))


async def _workers(args: argparse.Namespace) -> int:
    runner = await runner_from_args(args)
    try:
        fleet = await read_workers(runner)
        now = runner.clock.now()
    finally:
        await runner.close()
    warn_unreadable(fleet.unreadable)
    if getattr(args, "json", False):
        emit_json(
            {
                "workers": [_json(row) for row in fleet.rows],
                "unreadable": unreadable_json(fleet.unreadable),
                "more": fleet.more,
            }
        )
        return 0
    if fleet.rows:
        table(
            sys.stdout,
            ["ID", "STATE", "HOST", "PID", "HELD", "LAST SEEN", "RUNS"],
            [_line(row, now) for row in fleet.rows],
        )
    sys.stdout.write(_summary(fleet) + "\n")
    return 0


def _line(row: WorkerRow, now: float) -> list[str]:
    record = row.record
    runs = ", ".join(run[:12] for run in record.runs[:RUNS_SHOWN])
    if record.held > RUNS_SHOWN:
        runs += f" and {record.held - RUNS_SHOWN} more"
    state = row.state + (" (id shared)" if row.shared_id else "")
    return [
        record.worker_id,
        state,
        record.host,
        str(record.pid),
        f"{record.held}/{record.concurrency}",
        f"{age(now - record.beat_at)} ago",
        runs or "-",
    ]


def _summary(fleet: Fleet) -> str:
    counts = ", ".join(f"{fleet.count(state)} {state}" for state in ("live", "gone", "stopped"))
    more = " (more records than one read takes: the oldest left out)" if fleet.more else ""
    return f"{counts}{more}"


def _json(row: WorkerRow) -> dict[str, Any]:
    record = row.record
    return {
        "id": record.worker_id,
        "state": row.state,
        "id_shared": row.shared_id,
        "host": record.host,
        "pid": record.pid,
        "concurrency": record.concurrency,
        "held": record.held,
        "runs": list(record.runs),
        "started_at": when(record.started_at),
        "last_seen": when(record.beat_at),
        "beat": record.every,
        "stopped_at": when(record.stopped_at) if record.stopped_at is not None else None,
        "key": row.key,
    }


def cmd_schedules(args: argparse.Namespace) -> int:
    """Each schedule with its last tick, the run that tick started, and its
    next ticks (``--count`` of them with ``--app``; the marker's next without)."""
    if args.count < 1:
        raise CliError(f"--count must be at least 1, got {args.count}", 2)
    return asyncio.run(_schedules(args))


async def _schedules(args: argparse.Namespace) -> int:
    runner = await runner_from_args(args)
    try:
        defined = {schedule.name: schedule for schedule in runner.scheduler.schedules}
        listed = await read_schedules(runner, list(defined.values()))
        now = runner.clock.now()
    finally:
        await runner.close()
    warn_unreadable(listed.unreadable)

    def upcoming(row: ScheduleRow) -> list[str]:
        schedule = defined.get(row.name)
        if schedule is not None:
            after = now if row.next_tick is None else min(now, row.next_tick - 1e-6)
            return [tick.isoformat() for tick in next_ticks(schedule, after, args.count)]
        return [] if row.next_tick is None else [when(row.next_tick)]

    if getattr(args, "json", False):
        emit_json(
            {
                "schedules": [
                    {
                        "name": row.name,
                        "spec": row.spec,
                        "missed": row.missed,
                        "overlap": row.overlap,
                        "paused": row.paused,
                        "paused_at": row.paused_at,
                        "paused_by": row.paused_by,
                        "note": row.note,
                        "skipped_tick": row.skipped_tick,
                        "skipped_why": row.skipped_why,
                        "buffered": row.buffered,
                        "last_tick": row.last_tick,
                        "last_run": row.last_run,
                        "run_state": row.run_state,
                        "next_ticks": upcoming(row),
                        "overdue": row.overdue,
                        "in_app": row.in_app,
                    }
                    for row in listed.rows
                ],
                "unreadable": unreadable_json(listed.unreadable),
            }
        )
    elif not listed.rows:
        print("no schedules: none has a marker in this store (--app lists the application's)")
    else:
        table(
            sys.stdout,
            ["NAME", "SCHEDULE", "MISSED", "OVERLAP", "LAST TICK", "LAST RUN", "NEXT TICKS"],
            [
                [
                    row.name,
                    row.spec or "-",
                    row.missed or "-",
                    row.overlap or "-",
                    when(row.last_tick),
                    _run(row),
                    ", ".join(upcoming(row))
                    + (" (overdue)" if row.overdue else "")
                    + (" (paused)" if row.paused else ""),
                ]
                for row in listed.rows
            ],
        )
        for row in listed.rows:
            for line in _notes(row):
                print(short(f"{row.name}: {line}", 400))
    return 0


def _notes(row: ScheduleRow) -> list[str]:
    """What a schedule's row says below the table: paused, ticks waiting, the last skip."""
    lines = []
    if row.paused:
        by = f" by {row.paused_by}" if row.paused_by else ""
        note = f": {row.note}" if row.note else ""
        lines.append(f"paused since {when(row.paused_at)}{by}{note}")
    if row.buffered:
        lines.append(f"{row.buffered} tick(s) wait for its live run to end")
    if row.skipped_tick is not None:
        lines.append(f"skipped the tick of {when(row.skipped_tick)}: {row.skipped_why or '-'}")
    return lines


def _run(row: ScheduleRow) -> str:
    if row.last_run is None:
        return "-"
    return f"{row.last_run[:12]} {row.run_state or '(none kept)'}"
