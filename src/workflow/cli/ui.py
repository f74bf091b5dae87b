"""``stepstone ui``: serve the web view of a store until Ctrl-C; ``stepstone
ui-user``: add a user to its users file.

Read-only unless ``--allow-actions``: then its pages can retry, cancel,
replay and send events, each confirmed, each a POST with the session's CSRF
token, each recorded in the audit log. Who may use them: with sign-in
(``--users FILE``, or a proxy that signs users in: ``--trusted-proxy``
and ``--user-header``), the operators; with none, anyone who reaches the
view, which is then this machine only (:func:`stepstone.ui.guard.check_serving`).

The store comes as for every command (``STORE_URL``, ``--store``,
``STEPSTONE_STORE`` or ``--app``); the page listens on 127.0.0.1 unless
``--host`` says otherwise, since it shows jobs' inputs and results, and
its first line says who can reach it and how they sign in. It answers only
requests addressed to a local name, its address or a name ``--allow-host``
adds (a proxy's).
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path

from stepstone.cli.errors import CliError
from stepstone.cli.runners import runner_from_args
from stepstone.ui.guard import Access, CannotServeSo, check_serving, who_can_reach
from stepstone.ui.passwords import check_password, hash_password
from stepstone.ui.server import CannotServe, serve_ui
from stepstone.ui.users import User, Users, UsersFileError, check_name, check_role, save_user

USERS_ENV = "STEPSTONE_UI_USERS"
"""The users file, when ``--users`` is not given."""


def cmd_ui(args: argparse.Namespace) -> int:
    if args.store_url:
        args.store = args.store_url
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port must be a port number, got {args.port}", 2)
    if args.refresh < 0:
        raise CliError(f"--refresh must not be negative, got {args.refresh}", 2)
    users_path = args.users or os.environ.get(USERS_ENV) or None
    try:
        access = Access(
            users=None if users_path is None else Users(Path(users_path)),
            trusted_proxies=tuple(p.strip() for p in args.trusted_proxy if p.strip()),
            user_header=args.user_header,
            actions=args.allow_actions,
        )
        check_serving(args.host, access, no_sign_in=args.no_sign_in)
    except UsersFileError as exc:
        raise CliError(str(exc)) from None
    except CannotServeSo as exc:
        raise CliError(str(exc), 2) from None

    def ready(url: str, port: int) -> None:
        reach = who_can_reach(args.host, port)
        sys.stdout.write(
            f"stepstone ui on {url}, reachable by {reach}, {access.described()} (Ctrl-C stops it)\n"
        )
        sys.stdout.flush()

    try:
        serve_ui(
            lambda: runner_from_args(args),
            host=args.host,
            port=args.port,
            refresh=args.refresh,
            allow_hosts=args.allow_host,
            access=access,
            on_ready=ready,
        )
    except CannotServe as exc:
        raise CliError(str(exc)) from None
    return 0


def cmd_ui_user(args: argparse.Namespace) -> int:
    """Add, update or remove a user of the users file, or print their line."""
    try:
        name = check_name(args.name)
        role = check_role(args.role) if args.role is not None else None
    except UsersFileError as exc:
        raise CliError(str(exc), 2) from None
    users_path = args.users or os.environ.get(USERS_ENV) or None
    if args.remove:
        if users_path is None:
            raise CliError("--remove needs the users file: --users FILE or $STEPSTONE_UI_USERS", 2)
        return _saved(Path(users_path), None, name)
    if role is None:
        raise CliError("ui-user needs --role viewer or --role operator (or --remove)", 2)
    hashed = None if args.no_password else hash_password(_new_password())
    user = User(name, role, hashed)
    if users_path is None:
        sys.stdout.write(user.line() + "\n")  # for a file kept elsewhere (a secret store)
        return 0
    return _saved(Path(users_path), user, name)


def _saved(path: Path, user: User | None, name: str) -> int:
    try:
        said = save_user(path, user, name)
    except (UsersFileError, OSError) as exc:
        raise CliError(f"{path}: {exc}") from None
    if said == "absent":
        raise CliError(f"{name} is not in {path}")
    role = ""
    if user is not None:
        role = f" ({user.role}{'' if user.hashed else ', sign-in through the proxy only'})"
    where = {"added": "to", "removed": "from"}.get(said, "in")
    sys.stdout.write(f"{said} {name}{role} {where} {path}\n")
    return 0


def _new_password() -> str:
    """The password: asked twice at a terminal, else the first line of stdin."""
    if sys.stdin.isatty():
        first = getpass.getpass("password: ")
        if getpass.getpass("again: ") != first:
            raise CliError("the two passwords differ; nothing was written")
    else:
        first = sys.stdin.readline().rstrip("\r\n")
    try:
        check_password(first)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    return first
