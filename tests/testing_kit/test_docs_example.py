"""docs/testing.md's worked example, run as the user would run it: its files
written into a fresh project, pytest in a fresh interpreter, the plugin
loaded from the entry point. Keeps the page true."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).parents[2] / "docs" / "testing.md"


def example_files() -> dict[str, str]:
    """The doc's Python blocks whose first line names a file (``# shop/jobs.py``)."""
    files = {}
    for block in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S):
        first = block.splitlines()[0]
        if first.startswith("# ") and first.endswith(".py"):
            files[first[2:].strip()] = block
    return files


@pytest.mark.slow
def test_the_worked_example_passes(tmp_path: Path) -> None:
    files = example_files()
    assert set(files) == {"shop/jobs.py", "tests/conftest.py", "tests/test_charge.py"}
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "shop" / "__init__.py").write_text("")
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\nasyncio_mode = auto\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout, done.stdout
