"""Run ``mypy --strict`` over the stepstone package as it installs.

The repository keeps its three layers side by side (``src/workflow``,
``src/store``, ``src/runtime``) and setuptools' ``package-dir`` installs them
as one namespace (``stepstone``, ``stepstone.store``, ``stepstone.runtime``).
An editable install maps those names to the directories through an import
hook, which mypy does not run, and pointing mypy at ``src/`` would check
modules named ``workflow`` and ``store``. So this script lays the package out
as it installs, as a tree of symbolic links to the source files in
``.typecheck/``, runs mypy on that tree (plus ``examples/``), and prints
mypy's findings with the source paths, so an editor jumps to the real file.

    python tools/typecheck.py [extra mypy arguments]

The mapping is read from pyproject.toml, so a package added there is checked
without touching this script. Exit status: mypy's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / ".typecheck"
LINKED = (".py", ".pyi", "py.typed")


def package_dirs() -> dict[str, Path]:
    """``{"stepstone.store": <repo>/src/store, ...}`` from pyproject.toml.

    Every package in ``packages``, found as setuptools finds it: under the
    ``package-dir`` entry of its nearest listed ancestor (``stepstone.store.file``
    in ``src/store/file``).
    """
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = setuptools["package-dir"]
    found: dict[str, Path] = {}
    for name in setuptools["packages"]:
        ancestor, below = name, []
        while ancestor not in mapping:
            ancestor, _, last = ancestor.rpartition(".")
            below.insert(0, last)
        found[name] = ROOT.joinpath(mapping[ancestor], *below)
    return found


def build_tree(packages: dict[str, Path]) -> dict[Path, Path]:
    """Link every source file where it installs; returns {tree dir: source dir}."""
    shutil.rmtree(TREE, ignore_errors=True)
    where: dict[Path, Path] = {}
    for name, source in packages.items():
        target = TREE.joinpath(*name.split("."))
        target.mkdir(parents=True, exist_ok=True)
        where[target] = source
        for entry in sorted(source.iterdir()):
            if entry.is_file() and entry.name.endswith(LINKED):
                (target / entry.name).symlink_to(entry)
    return where


def main(argv: list[str]) -> int:
    packages = package_dirs()
    where = build_tree(packages)
    roots = sorted({name.split(".")[0] for name in packages})
    command = [
        sys.executable,
        "-m",
        "mypy",
        *(str((TREE / root).relative_to(ROOT)) for root in roots),
    ]
    command += [str(p.relative_to(ROOT)) for p in sorted((ROOT / "examples").glob("*.py"))]
    env = dict(os.environ, MYPYPATH=str(TREE))
    done = subprocess.run(
        [*command, *argv], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    # Longest first, so .typecheck/stepstone/store/ wins over .typecheck/stepstone/.
    prefixes = sorted(
        (
            (str(t.relative_to(ROOT)) + os.sep, str(s.relative_to(ROOT)) + os.sep)
            for t, s in where.items()
        ),
        key=lambda pair: -len(pair[0]),
    )
    for stream, text in ((sys.stdout, done.stdout), (sys.stderr, done.stderr)):
        for line in text.splitlines(keepends=True):
            for tree_prefix, source_prefix in prefixes:
                if line.startswith(tree_prefix):
                    line = source_prefix + line[len(tree_prefix) :]
                    break
            stream.write(line)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
