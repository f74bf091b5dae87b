"""Text a job wrote reaches the operator's terminal and log escaped, never raw.

A job's exception message with an escape sequence, a carriage return or a
newline would otherwise clear the screen, rewrite a row of ``stepstone ls``
or forge a line of the worker's log.
"""

from __future__ import annotations

import io
import logging
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_app import Refuse
from cli_support import DEADLINE, Cli, file_runner

from stepstone import JobFailed
from stepstone.telemetry.escaping import escape_controls
from stepstone.telemetry.logs import TextFormatter

HOSTILE = "\x1b[2J\x1b[Hscreen cleared\rrow rewritten\n2026-01-01 forged line \x9b31m \u202eevil"


def raw_controls(text: str) -> list[str]:
    """Control and format characters other than line breaks: what a terminal acts on."""
    return [c for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]


@pytest.fixture
def text_log() -> Iterator[io.StringIO]:
    """The worker's text log (stepstone worker --log-format text), captured."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield stream
    root.removeHandler(handler)
    root.setLevel(level)


async def test_a_jobs_control_characters_are_escaped_in_ls_show_and_the_text_log(
    cli: Cli, store_dir: Path, text_log: io.StringIO
) -> None:
    async with file_runner(store_dir) as runner:
        handle = await runner.submit(Refuse(message=HOSTILE))
        with pytest.raises(JobFailed) as failed:
            await handle.result(timeout=DEADLINE)
    assert failed.value.message == f"Permanent: {HOSTILE}", "the record keeps the text as it was"
    escaped = escape_controls(HOSTILE)
    assert escaped.startswith("\\x1b[2J\\x1b[Hscreen cleared\\rrow rewritten\\n2026")

    store = ["--store", str(store_dir)]
    for command in (["ls", "--status", "dead"], ["ls"], ["show", handle.id]):
        shown = cli(*command, *store)
        assert shown.status == 0, shown.err
        assert raw_controls(shown.out) == [], command
        assert "\\x1b[2J\\x1b[Hscreen cleared\\r" in shown.out, command
    detail = cli("show", handle.id, "--json", *store).json()
    assert detail["outcome"]["error"]["message"] == f"Permanent: {HOSTILE}", "JSON stays exact"

    log = text_log.getvalue()
    assert raw_controls(log) == []
    assert escaped in log
    lines = log.splitlines()
    assert not any(line.startswith("2026-01-01 forged") for line in lines), log


def test_escape_controls_keeps_text_and_line_breaks_on_request() -> None:
    assert escape_controls("plain text, ünïcode, 日本") == "plain text, ünïcode, 日本"
    assert escape_controls("a\tb\x00c\x7fd\u2028e") == "a\\tb\\x00c\\x7fd\\u2028e"
    assert escape_controls("line one\nline\x1b two", newlines=True) == "line one\nline\\x1b two"
