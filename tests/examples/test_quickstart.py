"""README command 1 runs examples/quickstart.py: it must keep telling the truth."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

QUICKSTART = Path(__file__).parents[2] / "examples" / "quickstart.py"


def run(store: Path | str) -> str:
    done = subprocess.run(
        [sys.executable, str(QUICKSTART), str(store)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


@pytest.fixture(params=["directory", "moto", "real"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where the quickstart runs: a directory, S3 on moto, a real S3 server."""
    if request.param == "directory":
        return tmp_path
    url: str = request.getfixturevalue("s3_url" if request.param == "moto" else "real_s3_url")
    return url


def test_quickstart_retries_replays_and_answers_a_resubmission(store: Path | str) -> None:
    first = run(store)
    assert first.count("[network] quoting o-1") == 1, first
    assert "charge timed out" in first and "charged 1250 EUR" in first
    assert "rcpt-o-1 after 2 attempt(s)" in first
    assert "newly_submitted=False, same id: True" in first

    second = run(store)
    assert "[network]" not in second, "a rerun on the same directory ran the job again"
    assert "rcpt-o-1" in second


def test_quickstart_on_a_store_told_the_wrong_etag_form_ends_in_seconds_saying_why(
    real_s3_url: str,
) -> None:
    """Ceph RGW 16 compares If-Match without quotes: a store told to send
    them quoted has every swap refused. It must not hang: the worker stops
    and the awaited handle raises one error naming the setting and
    check-store. (Without the setting the store finds the form out.)"""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(QUICKSTART), real_s3_url + "&etag_quotes=quoted"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - start
    assert done.returncode != 0, done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert "StoreConfigError" in last and "stepstone check-store" in last, done.stderr
    assert "etag_quotes=bare or auto" in last, last
    print(f"ended in {took:.1f} s: {last}")
