"""MkDocs hook (mkdocs.yml's ``hooks``): lay the package out as it installs
before the API reference is read, so mkdocstrings (griffe) finds
``stepstone.store`` and ``stepstone.runtime``, which live in src/store and
src/runtime, under ``stepstone`` (tools/layout.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from layout import ROOT, build_tree

TREE = ROOT / ".docs-tree"


def on_startup(**_: Any) -> None:
    build_tree(TREE)
