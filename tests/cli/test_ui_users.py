"""The web view's users: password hashes (scrypt, checked in constant time),
the users file and its mistakes named by line, and ``stepstone ui-user``,
which writes it (mode 0600) without ever holding a password in it."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from stepstone.ui.passwords import (
    BadHash,
    check_hash,
    decoy_hash,
    hash_password,
    verify_password,
)
from stepstone.ui.users import Users, UsersFileError, parse_users

PASSWORD = "correct horse battery"


def test_a_hash_checks_its_password_and_no_other() -> None:
    hashed = hash_password(PASSWORD)
    assert hashed.startswith("$scrypt$ln=14,r=8,p=5$") and PASSWORD not in hashed
    assert verify_password(PASSWORD, hashed)
    for wrong in ("", "correct horse battery ", "Correct horse battery", PASSWORD[:-1]):
        assert not verify_password(wrong, hashed)
    again = hash_password(PASSWORD)
    assert again != hashed and verify_password(PASSWORD, again)  # a fresh salt each time
    assert not verify_password(PASSWORD, decoy_hash())
    with pytest.raises(ValueError, match="at least 8 characters"):
        hash_password("short")


def test_a_hash_with_other_parameters_still_checks_and_a_broken_one_is_named() -> None:
    cheaper = hash_password(PASSWORD, log2_n=12)
    assert cheaper.startswith("$scrypt$ln=12,") and verify_password(PASSWORD, cheaper)
    prefix, salt, key = cheaper.rsplit("$", 2)
    flipped = key[:-2] + ("A" if key[-2] != "A" else "B") + key[-1]
    assert not verify_password(PASSWORD, f"{prefix}${salt}${flipped}")
    for broken, why in (
        ("plaintext-password", "not a password hash"),
        (f"$scrypt$ln=30,r=8,p=1${salt}${key}", "out of range"),  # 128 GiB a check: refused
        (f"$scrypt$ln=14,r=8,p=5${salt}$AAAA", "length"),
        ("$scrypt$ln=14,r=8,p=5$!!!!$!!!!", "not a password hash"),
    ):
        with pytest.raises(BadHash, match=why):
            check_hash(broken)
        with pytest.raises(BadHash):
            verify_password(PASSWORD, broken)


def test_the_users_file_names_the_line_of_each_mistake() -> None:
    hashed = hash_password(PASSWORD, log2_n=10)
    users = parse_users(f"# team\n\nalice:operator:{hashed}\ncarol@example.com:viewer:\n", "users")
    assert users["alice"].role == "operator" and users["alice"].hashed == hashed
    assert users["carol@example.com"].hashed is None  # signs in through the proxy only
    for text, why in (
        ("alice\n", "users line 1: not name:role:hash"),
        (f"alice:admin:{hashed}\n", "users line 1: 'admin' is not a role"),
        (f"# ok\nal ice:viewer:{hashed}\n", "users line 2: 'al ice' is not a user name"),
        ("alice:viewer:hunter2\n", "users line 1: not a password hash"),
        (f"alice:viewer:{hashed}\nalice:operator:{hashed}\n", "line 2: alice is listed twice"),
    ):
        with pytest.raises(UsersFileError) as raised:
            parse_users(text, "users")
        assert why in str(raised.value) and "hunter2" not in str(raised.value)


def test_the_file_is_read_again_when_it_changes_and_a_broken_one_leaves_the_last(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "users"
    hashed = hash_password(PASSWORD, log2_n=10)
    path.write_text(f"alice:viewer:{hashed}\n")
    users = Users(path)
    assert users.get("alice").role == "viewer"  # type: ignore[union-attr]
    path.write_text(f"alice:operator:{hashed}\nbob:viewer:{hashed}\n")
    os.utime(path, ns=(1, 1))  # another time, whatever the clock's resolution
    assert users.get("alice").role == "operator"  # type: ignore[union-attr]
    path.write_text("alice:root:\n")
    with caplog.at_level(logging.WARNING, logger="stepstone.ui.users"):
        assert users.get("bob") is not None
        assert users.get("bob") is not None
    [warning] = caplog.messages
    assert "line 1: 'root' is not a role" in warning and warning.endswith("read before are kept")
    with pytest.raises(UsersFileError, match="cannot read the users file"):
        Users(tmp_path / "absent")


def ui_user(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stepstone", "ui-user", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_ui_user_adds_updates_and_removes_users_in_a_file_only_its_owner_reads(
    tmp_path: Path,
) -> None:
    path = tmp_path / "users"
    added = ui_user("alice", "--role", "viewer", "--users", str(path), stdin=PASSWORD + "\n")
    assert added.returncode == 0 and added.stdout == f"added alice (viewer) to {path}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert PASSWORD not in path.read_text()
    changed = ui_user("alice", "--role", "operator", "--users", str(path), stdin="a new one!\n")
    assert changed.stdout == f"updated alice (operator) in {path}\n"
    proxy = ui_user(
        "carol@example.com", "--role", "operator", "--no-password", "--users", str(path)
    )
    assert proxy.stdout.startswith("added carol@example.com (operator, sign-in through the proxy")
    users = Users(path)
    alice = users.get("alice")
    assert alice is not None and alice.role == "operator" and alice.hashed is not None
    assert verify_password("a new one!", alice.hashed)
    assert ui_user("alice", "--remove", "--users", str(path)).returncode == 0
    assert [line.split(":")[0] for line in path.read_text().splitlines()] == ["carol@example.com"]

    # No file named: the line, for a secret store.
    line = ui_user("dave", "--role", "viewer", stdin=PASSWORD + "\n")
    name, role, hashed = line.stdout.strip().split(":", 2)
    assert (name, role) == ("dave", "viewer") and verify_password(PASSWORD, hashed)

    for args, stdin, why in (
        (("eve", "--role", "viewer", "--users", str(path)), "short\n", "at least 8 characters"),
        (("eve", "--users", str(path)), "", "needs --role"),
        (("e ve", "--role", "viewer"), "", "is not a user name"),
        (("ghost", "--remove", "--users", str(path)), "", "ghost is not in"),
    ):
        refused = ui_user(*args, stdin=stdin)
        assert refused.returncode in (1, 2) and refused.stdout == ""
        [said] = refused.stderr.splitlines()
        assert said.startswith("stepstone: error: ") and why in said, said
    assert [line.split(":")[0] for line in path.read_text().splitlines()] == ["carol@example.com"]
