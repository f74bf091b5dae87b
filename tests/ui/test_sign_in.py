"""A web view a team can share, in a real headless browser: sign-in with the
users file, a viewer who cannot act, an operator whose action the audit
shows, a wrong password refused (and, repeated, made to wait), a proxy's
user header believed only from a trusted address, and the session cookie's
flags.

The screenshots docs/operations.md shows of the sign-in page and the audit
page are taken here (``STEPSTONE_UPDATE_SCREENSHOTS=1`` writes
docs/img/ui-signin.png and ui-audit.png), from a store of realistic runs.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from test_actions import confirm
from test_browser import click, screenshot_of, text, texts
from ui_jobs import Charge, Ship
from ui_kit import DEADLINE, serve, status_of, wait_for

from stepstone import JobRunner, SubmitOptions
from stepstone.ops import actions
from stepstone.ops.audited import audited, done
from stepstone.records.audit import Actor
from stepstone.ui.passwords import hash_password

PASSWORDS = {"alice": "alice-operator-pw", "bob": "bob-viewer-pw"}

DOCS_IMG = Path(__file__).parents[2] / "docs" / "img"
"""Where STEPSTONE_UPDATE_SCREENSHOTS=1 puts the sign-in and audit pages' shots
(tools/screenshots.py takes the others, from its demo shop)."""


@dataclass
class Team:
    """A store of realistic runs, and the users file of the team that shares its view."""

    store: str
    users: Path
    dead: str
    scheduled: str
    paid: str

    async def status(self, run_id: str) -> str:
        return await status_of(self.store, run_id)

    def audit(self, *options: str) -> list[dict[str, Any]]:
        """``stepstone audit --json`` on the store."""
        done = subprocess.run(
            [sys.executable, "-m", "stepstone", "audit", "--json", "--store", self.store, *options],
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )
        assert done.returncode == 0, done.stderr
        records: list[dict[str, Any]] = json.loads(done.stdout)["records"]
        return records


@pytest.fixture
async def team(store_url: str, tmp_path: Path) -> AsyncIterator[Team]:
    """Two payments that went through, one the bank declined (dead), a
    shipment scheduled for later; alice is an operator, bob a viewer, carol
    an operator who signs in only through the proxy."""
    users = tmp_path / "users"
    users.write_text(
        "# the team\n"
        f"alice:operator:{hash_password(PASSWORDS['alice'])}\n"
        f"bob:viewer:{hash_password(PASSWORDS['bob'])}\n"
        "carol@example.com:operator:\n"
    )
    runner = JobRunner(store_url, jobs=[Ship, Charge], retry_backoff=0.0, poll_interval=0.05)
    async with runner:
        paid = await runner.submit(Ship(order="A-1042"))
        await paid.result(timeout=DEADLINE)
        declined = await runner.submit(Charge(invoice="INV-2207", cents=12_900))
        assert not (await declined.join(timeout=DEADLINE)).ok
        later = await runner.submit(
            Ship(order="A-1043"), SubmitOptions(run_at=datetime.now(UTC) + timedelta(hours=3))
        )
    await runner.close()
    yield Team(store_url, users, declined.id, later.id, paid.id)


def sign_in(browser: Any, name: str, password: str) -> None:
    """Fill the sign-in form that the page shows, and send it."""
    filled = browser.execute_script(
        """const form = document.querySelector("form.signin");
        if (!form) return false;
        form.elements.name.value = arguments[0];
        form.elements.password.value = arguments[1];
        form.submit();
        return true;""",
        name,
        password,
    )
    assert filled, "no sign-in form on the page"


def on_sign_in_page(browser: Any) -> bool:
    return bool(browser.title == "Sign in · stepstone")


async def test_an_operator_signs_in_acts_and_the_audit_shows_who_did_it(
    team: Team, browser: Any, tmp_path: Path
) -> None:
    with serve(team.store, tmp_path, "--users", str(team.users), "--allow-actions") as url:
        first_line = (tmp_path / "first-line").read_text()
        assert "sign-in by password" in first_line and "actions on for operators" in first_line
        browser.get(f"{url}runs/{team.dead}")
        assert on_sign_in_page(browser)
        assert text(browser, "main .problem") == "Sign in to use this view."
        assert browser.execute_script("return document.querySelector('header nav')") is None
        screenshot = tmp_path / "ui-signin.png"
        assert browser.save_screenshot(str(screenshot))
        if os.environ.get("STEPSTONE_UPDATE_SCREENSHOTS"):
            shutil.copyfile(screenshot, DOCS_IMG / "ui-signin.png")

        sign_in(browser, "alice", "not her password")
        wait_for(lambda: "Wrong name or password." in text(browser, "main"), "the refusal")
        sign_in(browser, "alice", PASSWORDS["alice"])
        wait_for(lambda: browser.current_url == f"{url}runs/{team.dead}", "the page asked for")
        assert text(browser, "header .who") == "alice · operator"

        click(browser, "nav.actions a", "Retry…")
        confirm(browser, f"Retry dead run {team.dead} (payments.charge)?")
        assert text(browser, "section.result").startswith(f"requeued {team.dead}")
        assert await team.status(team.dead) == "ready"
        wait_for(lambda: "alice" in text(browser, "#audit"), "the run's audit")
        [row] = texts(browser, "#audit tbody tr")
        assert "alice operator" in row and "127.0.0.1" in row and "retry" in row
        assert "done" in row

        # An action from the command line joins the same list (an operator's shell).
        runner = JobRunner(team.store)
        try:
            await audited(
                runner,
                Actor("sam@ops-bastion", "cli", "os"),
                "cancel",
                [team.scheduled],
                lambda: actions.cancel(runner, team.scheduled),
                done("cancelled"),
            )
        finally:
            await runner.close()
        browser.get(f"{url}audit")
        wait_for(lambda: len(texts(browser, "table.audit tbody tr")) == 2, "both actions")
        newest, oldest = texts(browser, "table.audit tbody tr")
        assert "sam@ops-bastion" in newest and "CLI" in newest and "cancel" in newest
        assert "alice" in oldest and team.dead[:12] in oldest
        screenshot = tmp_path / "ui-audit.png"
        screenshot_of(browser, "main", screenshot)
        if os.environ.get("STEPSTONE_UPDATE_SCREENSHOTS"):
            shutil.copyfile(screenshot, DOCS_IMG / "ui-audit.png")

        [record] = team.audit("--run", team.dead)
        assert (record["who"], record["via"], record["sign_in"]) == ("alice", "web", "password")
        assert (record["role"], record["address"], record["outcome"]) == (
            "operator",
            "127.0.0.1",
            "done",
        )

        click(browser, "header form.signout button")
        wait_for(lambda: on_sign_in_page(browser), "the sign-in page")
        browser.get(f"{url}runs/{team.dead}")
        assert on_sign_in_page(browser)  # signed out: the pages are closed again


async def test_a_viewer_reads_but_has_no_action_and_is_refused_one(
    team: Team, browser: Any, tmp_path: Path
) -> None:
    with serve(team.store, tmp_path, "--users", str(team.users), "--allow-actions") as url:
        browser.get(url)
        sign_in(browser, "bob", PASSWORDS["bob"])
        wait_for(lambda: not on_sign_in_page(browser), "the runs list")
        assert text(browser, "header .who") == "bob · viewer"
        assert "actions on" not in text(browser, "header")
        browser.get(f"{url}runs/{team.dead}")
        assert "card declined" in text(browser, "#outcome")
        assert browser.execute_script("return document.querySelector('nav.actions')") is None
        browser.get(f"{url}act/retry?run={team.dead}")
        assert "your role, viewer, cannot act on runs; an operator can" in text(browser, "main")

        # Sent anyway, with the session's own token: refused, and the run as it was.
        cookies = {c["name"]: c["value"] for c in browser.get_cookies()}
        token = browser.execute_script(
            "return document.querySelector('form.signout input[name=csrf]').value"
        )
        status, page = post(f"{url}act/retry", {"run": team.dead, "csrf": token}, cookies=cookies)
        assert status == 403 and "your role, viewer, cannot act" in page
    assert await team.status(team.dead) == "dead"
    assert team.audit() == []


def post(
    url: str, fields: dict[str, str] | None, *, cookies: dict[str, str] | None = None
) -> tuple[int, str]:
    data = None if fields is None else urllib.parse.urlencode(fields).encode()
    request = urllib.request.Request(url, data=data)
    if cookies:
        request.add_header("Cookie", "; ".join(f"{k}={v}" for k, v in cookies.items()))
    try:
        with urllib.request.urlopen(request, timeout=DEADLINE) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


class Visitor:
    """A browser without the browser: cookies kept, statuses seen, headers sent."""

    def __init__(self, base: str, headers: dict[str, str] | None = None) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        self.headers = headers or {}
        self.set_cookies: list[str] = []

    def open(self, path: str, fields: dict[str, str] | None = None) -> tuple[int, str]:
        data = None if fields is None else urllib.parse.urlencode(fields).encode()
        request = urllib.request.Request(self.base + path.lstrip("/"), data=data)
        for name, value in self.headers.items():
            request.add_header(name, value)
        try:
            with self.opener.open(request, timeout=DEADLINE) as response:
                self.set_cookies += response.headers.get_all("Set-Cookie") or []
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            self.set_cookies += error.headers.get_all("Set-Cookie") or []
            return error.code, error.read().decode()

    def token(self, page: str) -> str:
        found = re.search(r'name="csrf" value="([^"]+)"', page)
        assert found, page
        return found.group(1)

    def sign_in(self, name: str, password: str, then: str = "/") -> tuple[int, str]:
        _, page = self.open("signin")
        form = {"csrf": self.token(page), "name": name, "password": password, "next": then}
        return self.open("signin", form)


def test_a_wrong_password_is_refused_and_repeated_failures_wait(team: Team, tmp_path: Path) -> None:
    # The test plays browsers at several addresses through a trusted proxy's header.
    trusted = ("--trusted-proxy", "127.0.0.1")
    with serve(team.store, tmp_path, "--users", str(team.users), *trusted) as url:

        def at(address: str) -> Visitor:
            return Visitor(url, {"X-Forwarded-For": address})

        status, page = at("198.51.100.1").open("")
        assert status == 401 and "Sign in to use this view." in page
        assert team.paid not in page  # nothing of the store before signing in
        for name, password in (("alice", "wrong"), ("mallory", PASSWORDS["alice"]), ("", "")):
            status, page = at("198.51.100.1").sign_in(name, password)
            assert status == 401 and "Wrong name or password." in page, (name, page)
        # A sign-in without the browser's token is refused before any password is checked.
        status, page = at("198.51.100.2").open(
            "signin", {"name": "alice", "password": PASSWORDS["alice"]}
        )
        assert status == 403 and "did not carry this browser&#39;s token" in page

        # Five failures from one address: the next try from it waits, right password or not.
        for _ in range(2):
            assert at("198.51.100.1").sign_in("bob", "wrong")[0] == 401
        status, page = at("198.51.100.1").sign_in("bob", PASSWORDS["bob"])
        assert status == 429 and "Too many failed sign-ins" in page
        assert at("198.51.100.3").sign_in("bob", PASSWORDS["bob"])[0] == 200

        # Five failures for one name, from five addresses: that name waits, from anywhere.
        for n in range(10, 14):
            assert at(f"198.51.100.{n}").sign_in("alice", "guess")[0] == 401
        status, page = at("198.51.100.20").sign_in("alice", PASSWORDS["alice"])
        assert status == 429 and "try again in 15 minute(s)" in page


def test_the_session_cookie_is_http_only_same_site_and_ends_with_the_password(
    team: Team, tmp_path: Path
) -> None:
    trusted = ("--trusted-proxy", "127.0.0.1")
    with serve(team.store, tmp_path, "--users", str(team.users), *trusted) as url:
        visitor = Visitor(url)
        visitor.open("signin")
        [cookie] = visitor.set_cookies
        flags = [part.strip() for part in cookie.split(";")]
        assert flags[0].startswith("stepstone_session=")
        assert {"HttpOnly", "SameSite=Lax", "Path=/"} <= set(flags) and "Secure" not in flags
        assert visitor.sign_in("bob", PASSWORDS["bob"])[0] == 200
        [session] = [c.value for c in visitor.jar]
        assert PASSWORDS["bob"] not in session and "viewer" not in session
        assert post(url, None, cookies={"stepstone_session": session})[0] == 200
        # Where a sign-in goes next is a page of the view, never another site.
        for elsewhere in ("//evil.example/", "/\\evil.example", "https://evil.example/", "/\t/x"):
            status, page = Visitor(url).sign_in("bob", PASSWORDS["bob"], then=elsewhere)
            assert status == 200 and "<title>Runs · stepstone</title>" in page, elsewhere

        # Over HTTPS, as the trusted proxy says: Secure, and kept to this host.
        https = Visitor(url, {"X-Forwarded-Proto": "https"})
        https.open("signin")
        [secure] = https.set_cookies
        assert secure.startswith("__Host-stepstone_session=") and "; Secure" in secure

        # A cookie changed by hand is no session.
        signed, _, signature = session.rpartition(".")
        forged = f"{signed}.{signature[::-1]}"
        assert post(url, None, cookies={"stepstone_session": forged})[0] == 401

        # bob's password changed in the file: his session ends at his next request.
        lines = [
            f"bob:viewer:{hash_password('a new password')}" if line.startswith("bob:") else line
            for line in team.users.read_text().splitlines()
        ]
        team.users.write_text("\n".join(lines) + "\n")
        assert post(url, None, cookies={"stepstone_session": session})[0] == 401


async def test_the_proxy_header_is_believed_only_from_a_trusted_address(
    team: Team, browser: Any, tmp_path: Path
) -> None:
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd(
        "Network.setExtraHTTPHeaders",
        {"headers": {"X-Forwarded-User": "carol@example.com", "X-Forwarded-For": "203.0.113.50"}},
    )
    proxy = ("--user-header", "X-Forwarded-User", "--users", str(team.users), "--allow-actions")
    # Here the browser is the proxy: 127.0.0.1 is trusted, so its header names carol.
    with serve(team.store, tmp_path, "--trusted-proxy", "127.0.0.1", *proxy) as url:
        browser.get(f"{url}runs/{team.dead}")
        assert text(browser, "header .who") == "carol@example.com · operator"
        assert browser.execute_script("return document.querySelector('form.signout')") is None
        click(browser, "nav.actions a", "Retry…")
        confirm(browser, f"Retry dead run {team.dead} (payments.charge)?")
        [record] = team.audit("--run", team.dead)
        assert (record["who"], record["sign_in"], record["address"]) == (
            "carol@example.com",
            "proxy",
            "203.0.113.50",
        )
        # A user the file does not list is a viewer.
        outsider = Visitor(url, {"X-Forwarded-User": "dave@example.com"})
        status, page = outsider.open("")
        assert status == 200 and "dave@example.com · viewer" in page

    # The same headers from an address that is not the proxy's: not believed.
    with serve(team.store, tmp_path, "--trusted-proxy", "192.0.2.10", *proxy) as url:
        browser.get(f"{url}runs/{team.dead}")
        assert on_sign_in_page(browser)
        assert browser.execute_script("return document.querySelector('form.signin')") is not None
        status, page = Visitor(url, {"X-Forwarded-User": "carol@example.com"}).open("")
        assert status == 401 and "carol" not in page
        sign_in(browser, "bob", PASSWORDS["bob"])
        wait_for(lambda: not on_sign_in_page(browser), "bob's page")
        assert text(browser, "header .who") == "bob · viewer"
        browser.get(f"{url}act/retry?run={team.scheduled}")
        assert "your role, viewer, cannot act" in text(browser, "main")

    # With no password in the file for the proxy's users only: the page says where to go.
    only_proxy = tmp_path / "proxy-users"
    only_proxy.write_text("carol@example.com:operator:\n")
    with serve(
        team.store,
        tmp_path,
        "--trusted-proxy",
        "192.0.2.10",
        "--user-header",
        "X-Forwarded-User",
        "--users",
        str(only_proxy),
    ) as url:
        status, page = Visitor(url).open("")
        assert status == 401 and "signs users in through its proxy" in page
        assert 'name="password"' not in page

    assert len(team.audit()) == 1  # carol's retry; bob's was refused before it was tried
