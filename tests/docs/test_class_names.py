"""One name for one thing: no class name is defined twice in src/, so a
name in a traceback, a docstring or a review points at one class."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def test_no_class_name_is_defined_twice() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(f"{path.relative_to(SRC)}:{node.lineno}")
    twice = {name: places for name, places in where.items() if len(places) > 1}
    assert twice == {}
