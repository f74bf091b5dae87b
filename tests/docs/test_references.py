"""Every dotted ``stepstone`` name written in the source and the docs names
something that exists: a module, or an attribute of one (a class, a
function, a constant), or one of the names the engine gives its telemetry
(metric, span and attribute names, logger names). A module moved or renamed
without its references fails here, not in a reader's hands."""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOTTED = re.compile(r"(?<![\w./-])stepstone(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
WRITTEN = [
    *sorted((ROOT / "src").rglob("*.py")),
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
]


@cache
def engine_names() -> frozenset[str]:
    """The names the engine itself gives out as strings: its metrics, spans
    and their attributes, and its loggers (every ``"stepstone...."`` literal
    in src/)."""
    names: set[str] = set()
    for path in (ROOT / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
                if DOTTED.fullmatch(text):
                    names.add(text)
                if isinstance(node, ast.Constant) and text.startswith("stepstone.") and " " in text:
                    names.add(text.split(" ", 1)[0])  # a span's name: "stepstone.job <kind>"
    return frozenset(names)


def resolves(name: str) -> bool:
    """Whether ``name`` is a module, or an attribute path from one."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attribute in parts[cut:]:
                target = getattr(target, attribute)
        except AttributeError:
            return False
        return True
    return False


def references() -> list[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in WRITTEN:
        for match in DOTTED.finditer(path.read_text()):
            found.add((str(path.relative_to(ROOT)), match.group(0).rstrip(".")))
    return sorted(found)


@pytest.mark.parametrize(("where", "name"), references())
def test_a_dotted_stepstone_name_names_something_that_exists(where: str, name: str) -> None:
    if name in engine_names():
        return
    assert resolves(name), f"{where} names {name}, which is neither a module nor in one"
