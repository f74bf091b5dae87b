"""``stepstone ui``: serve the web view of a store until Ctrl-C.

Read-only unless ``--allow-actions``: then its pages can retry, cancel and
send events, each confirmed and each a POST with the view's CSRF token.

The store comes as for every command (``STORE_URL``, ``--store``,
``STEPSTONE_STORE`` or ``--app``); the page listens on 127.0.0.1 unless
``--host`` says otherwise, since it shows jobs' inputs and results, and
its first line says who can reach it. It answers only requests addressed
to a local name, its address or a name ``--allow-host`` adds (a proxy's).
"""

from __future__ import annotations

import argparse
import sys

from stepstone.cli.errors import CliError
from stepstone.cli.runners import runner_from_args
from stepstone.ui.guard import who_can_reach
from stepstone.ui.server import CannotServe, serve_ui


def cmd_ui(args: argparse.Namespace) -> int:
    if args.store_url:
        args.store = args.store_url
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port must be a port number, got {args.port}", 2)
    if args.refresh < 0:
        raise CliError(f"--refresh must not be negative, got {args.refresh}", 2)

    def ready(url: str, port: int) -> None:
        reach = who_can_reach(args.host, port)
        acting = "actions on" if args.allow_actions else "read-only"
        sys.stdout.write(
            f"stepstone ui on {url}, reachable by {reach}, {acting} (Ctrl-C stops it)\n"
        )
        sys.stdout.flush()

    try:
        serve_ui(
            lambda: runner_from_args(args),
            host=args.host,
            port=args.port,
            refresh=args.refresh,
            allow_hosts=args.allow_host,
            actions=args.allow_actions,
            on_ready=ready,
        )
    except CannotServe as exc:
        raise CliError(str(exc)) from None
    return 0
