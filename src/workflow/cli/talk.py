"""``stepstone stream`` and ``stepstone callback complete``, and what ``show``
says of a run's streams and callbacks.

``stream ID NAME`` prints the items of a run's stream, one a line: a string
as itself, any other value as JSON, every control character escaped
(``\\x1b``, ``\\n``: text a job wrote never drives the terminal); with
``--json``, one JSON object a line, ``{"offset": n, "value": v}``. It prints
what is written and stops, or with ``--follow`` waits for more until the
run closes the stream or ends.

``callback complete ID VALUE`` completes a callback as
``runner.complete_callback`` does: VALUE is JSON text, ``@path`` a file of
it, ``-`` standard input. It is an operator's action, recorded in the audit
log. (The shared ``--json`` option means JSON output, as for every command,
so the value is an argument of its own.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any, TextIO

from stepstone.cli.audit import operator
from stepstone.cli.errors import CliError
from stepstone.cli.render import json_text, short, when
from stepstone.cli.runners import runner_from_args
from stepstone.errors import BadStreamItem, CallbackRefused, EncodingError, RunNotFound
from stepstone.ops import run_ids
from stepstone.ops.audited import Said, audited
from stepstone.ops.talk import CallbackSeen, ItemSeen, StreamSeen
from stepstone.records.callbacks import MAX_BODY, CallbackId
from stepstone.records.layout import run_id_for_key
from stepstone.runner import JobRunner
from stepstone.telemetry.escaping import escape_controls


def cmd_stream(args: argparse.Namespace) -> int:
    if (args.id is None) == (args.key is None):
        raise CliError("stream takes a run id (or a start of it), or --key IDEMPOTENCY_KEY", 2)
    if args.start < 0:
        raise CliError(f"--from takes an offset >= 0, not {args.start}", 2)

    async def body() -> int:
        runner = await runner_from_args(args)
        try:
            if args.key is not None:
                run_id = run_id_for_key(args.key)
            else:
                run_id = await run_ids.resolve_id(runner, args.id)
            reader = runner.stream(run_id, args.name, start=args.start, follow=args.follow)
            out = sys.stdout
            try:
                async for item in reader.items():
                    out.write(_item_line(item.offset, item.value, as_json=args.json))
                    out.flush()
            except (RunNotFound, BadStreamItem) as exc:
                raise CliError(str(exc)) from None
            if not args.json:
                sys.stderr.write(f"{reader.offset - args.start} item(s) of stream {args.name!r}\n")
            return 0
        finally:
            await runner.close()

    return asyncio.run(body())


def _item_line(offset: int, value: Any, *, as_json: bool) -> str:
    if as_json:
        item = {"offset": offset, "value": value}
        return json.dumps(item, default=_plain, ensure_ascii=True) + "\n"
    text = value if isinstance(value, str) else json_text(value)
    return escape_controls(text) + "\n"


def _plain(obj: object) -> object:
    """What JSON cannot hold, as text (a bytes value: its size)."""
    if isinstance(obj, bytes):
        return f"<{len(obj)} bytes>"
    return str(obj)


def cmd_callback_complete(args: argparse.Namespace) -> int:
    try:
        callback = CallbackId.parse(args.id)
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    value = _value(args.value)

    async def body(runner: JobRunner) -> int:
        async def complete() -> bool:
            return await runner.complete_callback(str(callback), value)

        try:
            completed = await audited(
                runner,
                operator(),
                "callback",
                [callback.run_id],
                complete,
                lambda done: Said(
                    "done" if done else "refused",
                    f"completed callback {callback}"
                    if done
                    else f"callback {callback} had been completed already",
                ),
                detail={"callback": str(callback)},
            )
        except (CallbackRefused, EncodingError) as exc:
            raise CliError(str(exc)) from None
        if args.json:
            sys.stdout.write(json_text({"id": str(callback), "completed": completed}) + "\n")
        elif completed:
            print(f"completed callback {callback}; its run is woken")
        else:
            print(f"callback {callback} had been completed already: the first completion stands")
        return 0 if completed else 1

    async def run() -> int:
        runner = await runner_from_args(args)
        try:
            return await body(runner)
        finally:
            await runner.close()

    return asyncio.run(run())


def _value(text: str) -> Any:
    """The value VALUE gives: JSON text, ``@path`` (a file of it), ``-`` (stdin)."""
    where = "the value"
    if text == "-":
        text, where = sys.stdin.read(MAX_BODY + 1), "standard input"
    elif text.startswith("@"):
        path = text[1:]
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read(MAX_BODY + 1)
        except OSError as exc:
            raise CliError(f"cannot read {path!r}: {exc.strerror or exc}") from None
        where = repr(path)
    if len(text.encode()) > MAX_BODY:
        raise CliError(f"{where} is over the {MAX_BODY} bytes a callback takes")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CliError(f"{where} is not JSON: {exc}") from None


def print_talk(out: TextIO, streams: list[StreamSeen], callbacks: list[CallbackSeen]) -> None:
    """``show``'s lines on the run's streams and callbacks (none: nothing)."""
    if streams:
        out.write(f"streams ({len(streams)}):\n")
    for stream in streams:
        state = "closed" if stream.closed else "open"
        out.write(escape_controls(f"  {stream.name}  {stream.written} write(s), {state}") + "\n")
        for item in stream.last:
            shown = (
                "(its close)"
                if item.closes
                else f"<cannot read: {item.unreadable}>"
                if item.unreadable is not None
                else short(item.value, 80)
            )
            out.write(f"    {item.offset:>6}  {shown}\n")
    if callbacks:
        out.write(f"callbacks ({len(callbacks)}):\n")
    for seen in callbacks:
        expires = "never expires" if seen.expires_at is None else f"expires {when(seen.expires_at)}"
        out.write(escape_controls(f"  {seen.name}  {seen.state}, {expires}") + "\n")
        out.write(f"    id {seen.id}\n")
        if seen.state == "completed":
            out.write(f"    taken {when(seen.taken_at)}: {short(seen.value, 80)}\n")
        elif seen.state == "too large":
            out.write(f"    taken {when(seen.taken_at)}: {seen.size} bytes, over what it takes\n")
        if seen.late:
            out.write("    a later completion came after it was taken: ignored\n")
        if seen.unreadable is not None:
            out.write(f"    {escape_controls(seen.unreadable)}\n")


def _item_json(item: ItemSeen) -> dict[str, Any]:
    return {
        "offset": item.offset,
        "value": item.value,
        "close": item.closes,
        "unreadable": item.unreadable,
    }


def talk_json(streams: list[StreamSeen], callbacks: list[CallbackSeen]) -> dict[str, Any]:
    """``show --json``'s ``streams`` and ``callbacks``."""
    return {
        "streams": [
            {
                "name": s.name,
                "written": s.written,
                "closed": s.closed,
                "last": [_item_json(i) for i in s.last],
            }
            for s in streams
        ],
        "callbacks": [
            {
                "id": c.id,
                "name": c.name,
                "state": c.state,
                "expires_at": c.expires_at,
                "made_at": c.made_at,
                "taken_at": c.taken_at,
                "value": c.value,
                "size": c.size,
                "late": c.late,
                "unreadable": c.unreadable,
            }
            for c in callbacks
        ],
    }
