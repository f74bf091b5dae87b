"""The ``stepstone`` entry point: parse, run the command, and fail in one line.

Every failure a user can act on (a CliError, a job that is not there, a
store or queue that refuses) becomes ``stepstone: error: ...`` on stderr and
exit status 1 (2 for a usage mistake, 130 for Ctrl-C); a traceback is left
for bugs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

from stepstone.runtime.errors import QueueError
from stepstone.store import StoreError

from ..inspection import InspectError
from .errors import CliError
from .parser import build_parser


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
