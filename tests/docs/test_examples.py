"""The Python examples in README.md and docs/*.md run as written, so the docs
stay true. The convention, also in CONTRIBUTING.md:

- Every ```python block runs, unless the line just above its fence is
  ``<!-- not run: REASON -->`` (a signature, a fragment, a block that needs AWS).
- A page's blocks make one program. A block whose first line is a comment
  naming a file (``# shop/jobs.py``) is written to that file; the others are
  joined, in page order, into one script.
- The program runs in a fresh interpreter, in a fresh temporary directory, with
  a timeout: the script with ``python``, and files under ``tests/`` with pytest
  (``pythonpath = .``, pytest-asyncio in its default, strict, mode). It must exit 0. Examples keep
  their data in ``memory://`` or a relative directory, which lands there.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = "<!-- not run:"
FILE_LINE = re.compile(r"# ([\w./-]+\.py)")
TIMEOUT = 120  # seconds; the slowest program, testing.md's on moto S3, takes about 10
PYTEST_INI = "[pytest]\npythonpath = .\n"
"""pytest-asyncio's default (strict) mode: an example runs as a reader who
copies it runs it."""


def python_blocks(text: str) -> list[tuple[str, str]]:
    """Each ```python block of a page: (the line just above its fence, its body)."""
    lines = text.splitlines(keepends=True)
    blocks = []
    start = None
    for i, line in enumerate(lines):
        if start is None and line.rstrip() == "```python":
            start = i
        elif start is not None and line.rstrip() == "```":
            above = lines[start - 1].strip() if start else ""
            blocks.append((above, "".join(lines[start + 1 : i])))
            start = None
    return blocks


def program(page: Path) -> tuple[str, dict[str, str]]:
    """A page's runnable blocks: (the script, {file name: text})."""
    script: list[str] = []
    files: dict[str, str] = {}
    for above, body in python_blocks(page.read_text()):
        if above.startswith(NOT_RUN):
            continue
        named = FILE_LINE.fullmatch(body.split("\n", 1)[0])
        if named:
            files[named[1]] = body
        else:
            script.append(body)
    return "\n\n".join(script), files


RUNNABLE = [page for page in PAGES if any(program(page))]


def test_the_pages_users_start_from_have_runnable_examples() -> None:
    names = {str(page.relative_to(ROOT)) for page in RUNNABLE}
    assert {"README.md", "docs/quickstart.md", "docs/testing.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_not_run_marker_sits_on_a_python_block_and_says_why(page: Path) -> None:
    lines = page.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if line.strip().startswith(NOT_RUN):
            where = f"{page.name}:{number}"
            assert line.strip().endswith("-->") and len(line.strip()) > len(NOT_RUN) + 4, where
            assert number < len(lines) and lines[number].rstrip() == "```python", where


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE, ids=lambda page: str(page.relative_to(ROOT)))
def test_the_examples_run(page: Path, tmp_path: Path) -> None:
    script, files = program(page)
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    commands = []
    if script:
        (tmp_path / "example.py").write_text(script)
        commands.append([sys.executable, "example.py"])
    if any(name.startswith("tests/") for name in files):
        (tmp_path / "pytest.ini").write_text(PYTEST_INI)
        commands.append([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
    assert commands, f"{page.name}: its examples are files, and none of them is a test"
    for command in commands:
        done = subprocess.run(
            command, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT, check=False
        )
        assert done.returncode == 0, f"{page.name}: {command[1:]}\n{done.stdout}{done.stderr}"
