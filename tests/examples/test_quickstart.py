"""README command 1 runs examples/quickstart.py: it must keep telling the truth."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

QUICKSTART = Path(__file__).parents[2] / "examples" / "quickstart.py"


def run(directory: Path) -> str:
    done = subprocess.run(
        [sys.executable, str(QUICKSTART), str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def test_quickstart_retries_replays_and_answers_a_resubmission(tmp_path: Path) -> None:
    first = run(tmp_path)
    assert first.count("[network] quoting o-1") == 1, first
    assert "charge timed out" in first and "charged 1250 EUR" in first
    assert "rcpt-o-1 after 2 attempt(s)" in first
    assert "newly_submitted=False, same id: True" in first

    second = run(tmp_path)
    assert "[network]" not in second, "a rerun on the same directory ran the job again"
    assert "rcpt-o-1" in second
