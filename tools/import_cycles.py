"""Fail if the modules of ``src/`` import each other in a circle, or upward.

Layers import only downward (``stepstone`` -> ``stepstone.runtime`` ->
``stepstone.store``), and inside a layer a module may use only modules below
it: a reader can then take the package bottom-up, each module standing on
what came before. This script reads every import in ``src/`` (top-level,
inside functions, and type-only ones under ``TYPE_CHECKING``: a function-local
import hides a circle rather than removing it), resolves it to a module of
the package, and prints

- each strongly connected group of more than one module (or a module
  importing itself);
- each import that points up: from ``stepstone.store`` to a layer above it,
  from ``stepstone.runtime`` to the workflow layer, and inside the workflow
  layer from one of its parts to a part on a higher tier of :data:`TIERS`
  or on its own tier (the parts of a tier stand side by side and use
  neither each other).

    python tools/import_cycles.py        # exit 1 and what is wrong, or 0

The module names come from pyproject.toml's ``package-dir`` mapping, as
installed (``src/workflow/runner.py`` is ``stepstone.runner``).
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TIERS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("records", "telemetry"),
    ("limits", "schedule_overlap"),
    ("job",),
    ("handles",),
    ("submit",),
    ("execute",),
    ("schedules",),
    ("ops",),
    ("runner",),
    ("testing",),
    ("ui",),
    ("cli",),
    ("__init__", "__main__"),
)
"""The workflow layer's parts (its packages and top-level modules), bottom
first: a part imports only parts on lower tiers, never one beside it on its
own tier. The error tree is at the bottom, the records (and telemetry, which
names runs but reads none) on it; the pure rules (slots, rate limits, the
objects that keep them; a schedule's overlap policy) under the job types
that declare them; handles, then submit, then execute (an attempt, its admission under the limits
included); the runner, the composition root, over the operator tools it
offers; the web view, then the CLI (``stepstone ui`` starts the view) on
top. A new part of the layer must be placed here, or this check fails."""

LAYERS = ("stepstone.store", "stepstone.runtime", "stepstone")
"""The three layers, bottom first (a module belongs to the longest that prefixes it)."""


def modules() -> dict[str, Path]:
    """Every module of the package by its installed name."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found: dict[str, Path] = {}
    for package, directory in config["tool"]["setuptools"]["package-dir"].items():
        for path in sorted((ROOT / directory).rglob("*.py")):
            parts = path.relative_to(ROOT / directory).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports (an imported name that is a
    submodule counts as that submodule, else as the module it comes from)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            # The longest known module the target names: a submodule, or the
            # module that holds the imported name.
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def layer_of(name: str) -> int:
    """The layer ``name`` belongs to: its index in :data:`LAYERS`."""
    for index, layer in enumerate(LAYERS):
        if name == layer or name.startswith(layer + "."):
            return index
    raise ValueError(f"{name} is in no layer")


def part_of(name: str) -> str | None:
    """The workflow layer's part ``name`` belongs to (``stepstone.execute.memos``
    is in ``execute``, ``stepstone`` itself is ``__init__``); None for a
    module of another layer."""
    if layer_of(name) != LAYERS.index("stepstone"):
        return None
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Each import that points up, or sideways between the parts of one tier,
    as a line to print; and each part of the workflow layer with no tier."""
    tier = {part: index for index, parts in enumerate(TIERS) for part in parts}
    found: list[str] = []
    unplaced = sorted({p for n in graph if (p := part_of(n)) is not None and p not in tier})
    for part in unplaced:
        found.append(f"stepstone.{part} has no tier: place it in TIERS (tools/import_cycles.py)")
    for name in sorted(graph):
        for target in sorted(graph[name]):
            if layer_of(target) > layer_of(name):
                found.append(f"upward import: {name} imports {target} (a higher layer)")
                continue
            mine, theirs = part_of(name), part_of(target)
            if mine is None or theirs is None or mine == theirs:
                continue
            if mine not in tier or theirs not in tier:
                continue  # (said above)
            if tier[theirs] > tier[mine]:
                found.append(f"upward import: {name} imports {target} ({theirs} is above {mine})")
            elif tier[theirs] == tier[mine]:
                found.append(
                    f"sideways import: {name} imports {target} ({mine} and {theirs} "
                    "stand side by side)"
                )
    return found


def main() -> int:
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    found = cycles(graph)
    for group in found:
        print("import circle:", " <-> ".join(group))
        for member in group:
            inside = sorted(graph[member] & set(group))
            print(f"  {member} imports {', '.join(inside)}")
    wrong = upward(graph)
    for line in wrong:
        print(line)
    return 1 if found or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
