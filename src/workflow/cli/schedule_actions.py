"""``stepstone schedules pause|resume|backfill NAME``: an operator's actions
on a schedule (:mod:`stepstone.ops.schedule_actions`), each recorded in the
audit log. A pause and a resume need only the store (the schedule's
marker); a backfill needs the application (``--app``), whose definition
makes each tick's job."""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime

from stepstone.cli.audit import operator
from stepstone.cli.durations import parse_since
from stepstone.cli.render import emit_json, short
from stepstone.cli.runners import runner_from_args
from stepstone.ops import schedule_actions


def cmd_schedules_pause(args: argparse.Namespace) -> int:
    async def body() -> str:
        runner = await runner_from_args(args)
        try:
            return await schedule_actions.pause(
                runner, runner.scheduler, operator(), args.name, args.note
            )
        finally:
            await runner.close()

    return _said(args, asyncio.run(body()))


def cmd_schedules_resume(args: argparse.Namespace) -> int:
    async def body() -> str:
        runner = await runner_from_args(args)
        try:
            return await schedule_actions.resume(runner, runner.scheduler, operator(), args.name)
        finally:
            await runner.close()

    return _said(args, asyncio.run(body()))


def cmd_schedules_backfill(args: argparse.Namespace) -> int:
    async def body() -> int:
        runner = await runner_from_args(args)
        try:
            now = runner.clock.now()
            start = _moment(parse_since(args.start, now))
            end = _moment(now if args.end is None else parse_since(args.end, now))
            done = await schedule_actions.backfill(
                runner, runner.scheduler, operator(), args.name, start, end
            )
        finally:
            await runner.close()
        if getattr(args, "json", False):
            emit_json(
                {
                    "schedule": args.name,
                    "submitted": [
                        {"tick": tick.isoformat(), "run": run} for tick, run in done.submitted
                    ],
                    "existing": [
                        {"tick": tick.isoformat(), "run": run} for tick, run in done.existing
                    ],
                }
            )
        else:
            print(short(schedule_actions.backfilled_line(args.name, done), 2000))
        return 0

    return asyncio.run(body())


def _moment(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def _said(args: argparse.Namespace, line: str) -> int:
    if getattr(args, "json", False):
        emit_json({"schedule": args.name, "result": line})
    else:
        print(short(line, 2000))
    return 0
