"""The pages in docs/ speak to users about the code they install: no commit
hashes and no issue numbers. How a figure or a feature came about belongs in
benchmarks/NOTES.md and the issue tracker; the one line that says which
release the figures are from is in docs/performance.md."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").glob("*.md"))

SHORT_HASH = re.compile(r"(?<![\w/.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,11}(?![\w-])")
"""A short commit hash as git prints them (7 characters and up): hex with a
digit and a letter. Ids a user sees are longer (a run id is 12 characters,
a trace id 32), so they are not taken for one."""
ANY_HEX = re.compile(r"(?<![\w/.-])[0-9a-f]{12,40}(?![\w-])")
ISSUE = re.compile(r"\b(?:issue|ticket|PR|pull request)s?\s*#?\d+", re.IGNORECASE)


@cache
def repository_commits(candidates: frozenset[str]) -> frozenset[str]:
    """Which of ``candidates`` name a commit of this repository (a longer
    hash, or a run id that happens to be one). Empty outside a git checkout."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists() or not candidates:
        return frozenset()
    found = set()
    for name in sorted(candidates):
        answer = subprocess.run(
            [git, "-C", str(ROOT), "cat-file", "-e", f"{name}^{{commit}}"],
            capture_output=True,
            check=False,
        )
        if answer.returncode == 0:
            found.add(name)
    return frozenset(found)


def history_in(text: str) -> list[str]:
    """Each commit hash or issue number ``text`` names, as written."""
    found = [m.group(0) for m in SHORT_HASH.finditer(text)]
    found += [m.group(0) for m in ISSUE.finditer(text)]
    longer = frozenset(m.group(0) for m in ANY_HEX.finditer(text))
    found += sorted(repository_commits(longer))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_a_page_names_no_commit_and_no_issue(page: Path) -> None:
    found = history_in(page.read_text())
    assert not found, (
        f"docs/{page.name} names {sorted(set(found))}: commit hashes and issue numbers "
        "go to benchmarks/NOTES.md and the tracker, not to the user's pages"
    )


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("measured at commit `703dc81` on a quiet machine", ["703dc81"]),
        ("(bd9410a: one GET a keyed submit)", ["bd9410a"]),
        ("against issue 29's targets", ["issue 29"]),
        ("see Issue #32", ["Issue #32"]),
        ("stepstone show 3f0c9a1e2b7d --store ./jobs", []),
        ("trace id 4c1e9d0a5b7f3e21d6a8c0b9f4e2d1a7, 1,024 jobs, 0.56 s", []),
        ("an idempotency key such as charge:o-1 or 2026-12-01", []),
        ("docs/img/ui-runs.png", []),
    ],
)
def test_what_counts_as_history(text: str, named: list[str]) -> None:
    assert history_in(text) == named
