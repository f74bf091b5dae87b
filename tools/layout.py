"""The stepstone package laid out as it installs, for tools that read source
files by module name (mypy, griffe for the API reference).

The repository keeps its three layers side by side (``src/workflow``,
``src/store``, ``src/runtime``) and setuptools' ``package-dir`` installs them
as one namespace (``stepstone``, ``stepstone.store``, ``stepstone.runtime``).
An editable install maps those names through an import hook, which static
tools do not run. ``build_tree`` makes a tree of symbolic links to the source
files where they install; the mapping is read from pyproject.toml, so a
package added there needs nothing here.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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


def build_tree(tree: Path, packages: dict[str, Path] | None = None) -> dict[Path, Path]:
    """Link every source file under ``tree`` where it installs, replacing what
    was there; returns {tree dir: source dir}."""
    shutil.rmtree(tree, ignore_errors=True)
    where: dict[Path, Path] = {}
    for name, source in (packages or package_dirs()).items():
        target = tree.joinpath(*name.split("."))
        target.mkdir(parents=True, exist_ok=True)
        where[target] = source
        for entry in sorted(source.iterdir()):
            if entry.is_file() and entry.name.endswith(LINKED):
                (target / entry.name).symlink_to(entry)
    return where
