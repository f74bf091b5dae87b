"""``stepstone ui``: serve the read-only web view of a store until Ctrl-C.

The store comes as for every command (``STORE_URL``, ``--store``,
``STEPSTONE_STORE`` or ``--app``); the page listens on 127.0.0.1 unless
``--host`` says otherwise, since it shows jobs' inputs and results.
"""

from __future__ import annotations

import argparse
import sys

from stepstone.cli.errors import CliError
from stepstone.cli.runners import runner_from_args
from stepstone.ui.server import CannotServe, serve_ui


def cmd_ui(args: argparse.Namespace) -> int:
    if args.store_url:
        args.store = args.store_url
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port must be a port number, got {args.port}", 2)
    if args.refresh < 0:
        raise CliError(f"--refresh must not be negative, got {args.refresh}", 2)

    def ready(url: str) -> None:
        sys.stdout.write(f"stepstone ui on {url} (Ctrl-C stops it)\n")
        sys.stdout.flush()

    try:
        serve_ui(
            lambda: runner_from_args(args),
            host=args.host,
            port=args.port,
            refresh=args.refresh,
            on_ready=ready,
        )
    except CannotServe as exc:
        raise CliError(str(exc)) from None
    return 0
