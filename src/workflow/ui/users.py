"""The users file: who may use the web view, in which role.

One user a line, ``name:role:hash``; blank lines and lines starting with
``#`` are ignored::

    # stepstone ui users (stepstone ui-user NAME --role ROLE adds one)
    alice:operator:$scrypt$ln=14,r=8,p=5$...$...
    bob:viewer:$scrypt$ln=14,r=8,p=5$...$...
    carol@example.com:operator:

A role is ``viewer`` (reads every page) or ``operator`` (may also act, when
the view is started with ``--allow-actions``). A line with no hash is a
user who signs in only through a trusted proxy (``--user-header``): the
line gives them their role. The file holds hashes, never passwords
(:mod:`stepstone.ui.passwords`); keep it readable by the view's user only
(``ui-user`` writes it so, mode 0600).

The view reads the file again when it changes (its size, time or inode),
so a user added, removed or given another role counts from their next
request; a file that no longer parses is reported and the last good one
kept. Plain standard library, for the CLI's ``ui-user`` without the ``ui`` extra.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from stepstone.ui.passwords import BadHash, check_hash

log = logging.getLogger("stepstone.ui.users")

Role = Literal["viewer", "operator"]
ROLES: tuple[str, ...] = get_args(Role)
NAME = re.compile(r"[A-Za-z0-9._@+-]{1,128}")
"""What a user's name may hold: letters, digits and ``._@+-`` (an e-mail address fits)."""


class UsersFileError(ValueError):
    """A users file that cannot be used: the message names the file and line."""


@dataclass(frozen=True, slots=True)
class User:
    name: str
    role: Role
    hashed: str | None
    """The password's hash; None: signs in only through a trusted proxy."""

    def line(self) -> str:
        return f"{self.name}:{self.role}:{self.hashed or ''}"


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise UsersFileError(f"{name[:80]!r} is not a user name: 1 to 128 of A-Z a-z 0-9 . _ @ + -")
    return name


def check_role(role: str) -> Role:
    if role not in ROLES:
        raise UsersFileError(f"{role[:40]!r} is not a role (one of: {', '.join(ROLES)})")
    return role  # type: ignore[return-value]


def parse_users(text: str, source: str) -> dict[str, User]:
    """The users ``text`` lists; raises UsersFileError naming ``source`` and
    the line of the first mistake."""
    users: dict[str, User] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            name, role, hashed = line.split(":", 2)
            user = User(
                check_name(name),
                check_role(role),
                check_hash(hashed) if hashed else None,
            )
        except (ValueError, BadHash) as exc:
            why = "not name:role:hash" if "unpack" in str(exc) else str(exc)
            raise UsersFileError(f"{source} line {number}: {why}") from None
        if user.name in users:
            raise UsersFileError(f"{source} line {number}: {user.name} is listed twice")
        users[user.name] = user
    return users


def read_users(path: Path) -> dict[str, User]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsersFileError(f"cannot read the users file {path}: {exc}") from None
    return parse_users(text, str(path))


class Users:
    """The users of the file at ``path``, read again when it changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp = self._stat()
        self._users = read_users(path)
        self._refused: tuple[int, int, int] | None = None

    def get(self, name: str) -> User | None:
        """The user called ``name``, as the file says now."""
        self._reread()
        return self._users.get(name)

    def any_password(self) -> bool:
        """Whether someone can sign in with a password (else only through a proxy)."""
        self._reread()
        return any(user.hashed for user in self._users.values())

    def _stat(self) -> tuple[int, int, int]:
        try:
            found = os.stat(self.path)
        except OSError as exc:
            raise UsersFileError(f"cannot read the users file {self.path}: {exc}") from None
        return found.st_mtime_ns, found.st_size, found.st_ino

    def _reread(self) -> None:
        try:
            stamp = self._stat()
        except UsersFileError as exc:
            stamp = (0, 0, 0)  # gone: said once, the users read before kept
            reason = str(exc)
        else:
            if stamp in (self._stamp, self._refused):
                return
            try:
                self._users, self._stamp = read_users(self.path), stamp
                return
            except UsersFileError as exc:
                reason = str(exc)
        if stamp != self._refused:
            log.warning("%s; the users read before are kept", reason)
            self._refused = stamp


def save_user(path: Path, user: User | None, name: str) -> str:
    """Add ``user`` to the file at ``path``, or replace the line of the user
    called ``name`` with it (None: remove that line); the file is written
    whole and swapped in, mode 0600 when new. Returns what was done:
    ``added``, ``updated``, ``removed``, or ``absent`` (nothing to remove)."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    parse_users("\n".join(lines), str(path))  # a broken file is not rewritten
    said = "absent" if user is None else "added"
    kept: list[str] = []
    for line in lines:
        if line.strip().split(":", 1)[0] == name and not line.strip().startswith("#"):
            said = "removed" if user is None else "updated"
            if user is not None:
                kept.append(user.line())
            continue
        kept.append(line)
    if said == "added" and user is not None:
        kept.append(user.line())
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write("\n".join(kept) + "\n")
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return said
