"""``stepstone ui`` over plain HTTP: every page escapes what jobs wrote and
forbids any script but its own; the command fails in one line when it cannot
serve."""

from __future__ import annotations

import html as html_text
import http.client
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from email.message import Message
from pathlib import Path

from ui_jobs import HOSTILE, Retried
from ui_kit import DEADLINE, Runs, serve

from stepstone import JobRunner


def get(url: str) -> tuple[int, Message, str]:
    """Status, headers (their names in any case) and body of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()


def test_job_text_is_escaped_and_only_the_pages_own_script_may_run(runs: Runs, ui: str) -> None:
    for path in ("", f"runs/{runs.dead}", "?state=dead"):
        status, headers, html = get(ui + path)
        assert status == 200, html
        assert headers["Content-Type"].startswith("text/html")
        policy = headers["Content-Security-Policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy
        assert "&lt;script&gt;window.__pwned = 1;" in html
        assert "<script>window" not in html and "<img" not in html
        assert "\x1b" not in html and "\u202e" not in html
        assert html.count("<script") == 1  # the page's own, from /static/ui.js
    status, headers, script = get(ui + "static/ui.js")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript")
    assert "DOMParser" in script
    assert HOSTILE not in script


def test_an_unknown_filter_or_run_says_so(runs: Runs, ui: str) -> None:
    status, _, html = get(ui + "?state=exploded&since=1y")
    assert status == 400
    assert "unknown state &#39;exploded&#39;" in html and "unknown age" in html
    status, _, html = get(ui + "runs/not-a-run-id")
    assert status == 404 and "No run not-a-run-id" in html
    status, _, _ = get(ui + "static/../../conftest.py")
    assert status == 404


def test_the_command_fails_in_one_line_when_it_cannot_serve(tmp_path: Path) -> None:
    def ui(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "stepstone", "ui", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    done = ui(str(tmp_path / "nowhere"), "--port", "0")
    assert done.returncode == 1 and "does not exist" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = ui(str(tmp_path), "--port", str(port))
    assert done.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in done.stderr
    done = ui(str(tmp_path), "--port", "70000")
    assert done.returncode == 2 and "--port" in done.stderr


async def test_a_runs_page_shows_every_attempt_from_the_history(runs: Runs, ui: str) -> None:
    """Each claim, in order, with its worker, its error (escaped) and its
    traceback; the steps in the order they ran, each with the claim that ran it."""
    async with JobRunner(runs.store, jobs=[Retried], retry_backoff=0.0) as runner:
        handle = await runner.submit(Retried())
        assert await handle.result(timeout=DEADLINE) == "done"
        worker = runner.worker.worker_id
    status, _, page = get(f"{ui}runs/{handle.id}")
    assert status == 200, page
    attempts = page[page.index('<section id="attempts">') : page.index("<h3>Timeline</h3>")]
    headings = re.findall(r"<h3>(.*?)</h3>", attempts)
    assert headings == ["Attempt 1: failed", "Attempt 2: failed", "Attempt 3: succeeded"]
    assert attempts.count(f"<code>{worker}</code>") == 3
    assert attempts.count('<pre class="traceback">') == 2
    shown = html_text.unescape(attempts)
    assert "ConnectionError: attempt 2 refused <script>window.__pwned = 1;" in shown
    assert 'raise ConnectionError(f"attempt {ctx.attempt} refused {HOSTILE}")' in shown
    assert "<script>window" not in attempts and "\x1b" not in attempts
    steps = page[page.index('<section id="steps">') : page.index('<section id="attempts">')]
    assert re.findall(r'<td class="name">(.*?)</td>', steps) == ["reserve"]
    index, took, claim = re.findall(r'<td class="num">(.*?)</td>', steps)
    assert (index, claim) == ("1", "1")  # recorded by the first claim
    assert took.endswith(("ms", " s")), took


def get_as(url: str, host: str, path: str = "/") -> tuple[int, str]:
    """A GET of ``path`` from the server at ``url`` with ``host`` in its Host
    header, as a browser sends it for a name that resolves to this machine."""
    address = re.fullmatch(r"http://(.+):(\d+)/", url)
    assert address, url
    connection = http.client.HTTPConnection(address[1], int(address[2]), timeout=30)
    try:
        connection.putrequest("GET", path, skip_host=True)
        connection.putheader("Host", host)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def test_the_view_answers_only_the_host_names_that_reach_it_by_right(
    runs: Runs, ui: str, tmp_path: Path
) -> None:
    """DNS rebinding: a site the operator visits points its own name at
    127.0.0.1; the browser then sends that name as the Host, and must get
    no page (nor any run's input or result) back."""
    port = ui.rsplit(":", 1)[1].rstrip("/")
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost"):
        status, page = get_as(ui, host)
        assert status == 200, (host, page)
    for host in ("attacker.example", f"attacker.example:{port}", "127.0.0.1.attacker.example"):
        for path in ("/", f"/runs/{runs.succeeded}", "/static/ui.js"):
            status, page = get_as(ui, host, path)
            assert status == 400, (host, path, status)
            assert "o-1" not in page and len(page.splitlines()) == 1
    with serve(runs.store, tmp_path, "--allow-host", "jobs.example.com") as proxied:
        status, page = get_as(proxied, "jobs.example.com")
        assert status == 200
        # Linked by path, so the pages work under whatever name a proxy is reached by.
        assert 'href="/static/ui.css"' in page and "http://" not in page
        assert get_as(proxied, "localhost")[0] == 200
        assert get_as(proxied, "attacker.example")[0] == 400


def test_the_first_line_says_who_can_reach_the_view(runs: Runs, tmp_path: Path) -> None:
    with serve(runs.store, tmp_path) as _, open(tmp_path / "first-line") as said:
        line = said.read()
        assert "reachable by this machine only, no sign-in, read-only" in line, line
    with (
        serve(runs.store, tmp_path, "--host", "0.0.0.0", "--no-sign-in") as url,
        open(tmp_path / "first-line") as said,
    ):
        line = said.read()
        assert url.startswith("http://127.0.0.1:")
        assert (
            "reachable by anyone who can reach port" in line and "any of its addresses" in line
        ), line
        assert "no sign-in, read-only" in line


def test_a_view_for_other_machines_needs_sign_in_or_says_so(runs: Runs) -> None:
    """Served beyond this machine, the view signs visitors in, or is told
    plainly that it need not, and then never acts."""
    for options, said in (
        (("--host", "0.0.0.0"), "--host 0.0.0.0 serves other machines, so the view needs sign-in"),
        (
            ("--host", "0.0.0.0", "--no-sign-in", "--allow-actions"),
            "--allow-actions needs sign-in when the view serves other machines",
        ),
        (("--user-header", "X-Forwarded-User"), "--user-header needs --trusted-proxy ADDRESS"),
        (("--trusted-proxy", "proxy.example"), "is not an IP address or network"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "stepstone", "ui", runs.store, "--port", "0", *options],
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )
        assert done.returncode == 2, (options, done.stderr)
        assert done.stdout == ""
        assert done.stderr.startswith("stepstone: error: ") and said in done.stderr, done.stderr
        assert len(done.stderr.splitlines()) == 1
