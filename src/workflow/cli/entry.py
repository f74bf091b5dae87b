"""The ``stepstone`` entry point: parse, run the command, and fail in one line.

Every failure a user can act on (a CliError, a job that is not there, a
store or queue that refuses) becomes ``stepstone: error: ...`` on stderr and
exit status 1 (2 for a usage mistake, 130 for Ctrl-C:
:mod:`stepstone.cli.statuses`); even what no one foresaw is one line, never
a traceback. A reader that stops reading (``stepstone ls | head``) ends the
command quietly, as it ends any Unix tool: exit status 141 (128 + SIGPIPE),
nothing on stderr.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from stepstone.cli import statuses
from stepstone.cli.errors import CliError
from stepstone.cli.notices import notices_on_stderr
from stepstone.cli.parser import build_parser
from stepstone.errors import InspectError, PayloadUnreadable
from stepstone.runtime.errors import QueueError
from stepstone.store import StoreError
from stepstone.telemetry.escaping import escape_controls


def main(argv: Sequence[str] | None = None) -> int:
    """The ``stepstone`` entry point; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "json"):
        args.json = False
    try:
        if args.command == "worker":
            status: int = args.handler(args)  # it sets up its own logging
        else:
            with notices_on_stderr():
                status = args.handler(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return status
    except BrokenPipeError:
        _silence_stdout()
        return statuses.CLOSED_PIPE
    except CliError as exc:
        return _fail(str(exc), exc.status)
    except (InspectError, PayloadUnreadable) as exc:  # (a sealed payload: says which key)
        return _fail(str(exc))
    except StoreError as exc:
        return _fail(str(exc))
    except QueueError as exc:  # e.g. SqsUnsupported: `show` of a job SQS cannot look up
        return _fail(str(exc))
    except KeyboardInterrupt:
        return _fail("interrupted", statuses.INTERRUPTED)
    except Exception as exc:  # whatever a record holds, one line, never a traceback
        said = str(exc) if len(str(exc)) <= 300 else f"{str(exc)[:297]}..."
        return _fail(f"{type(exc).__name__}: {said} (unexpected: please report it)")


def _fail(message: str, status: int = statuses.FAILED) -> int:
    sys.stderr.write(f"stepstone: error: {escape_controls(message)}\n")
    return status


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush at exit
    does not meet the closed pipe again and print a traceback."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (an in-process caller's)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def run() -> NoReturn:
    sys.exit(main())
