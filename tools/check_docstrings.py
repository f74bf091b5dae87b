"""Fail if a public name of stepstone has no docstring for the API reference.

The public API is every name in ``stepstone.__all__`` and in the ``__all__``
of ``stepstone.store``, ``stepstone.runtime`` and ``stepstone.testing`` (the
modules docs/reference/ renders). For each, read from the source as the
reference's renderer (griffe, under mkdocstrings) reads it:

- a function, a class or a constant (a docstring under its assignment) has a
  docstring;
- so has each public method and property a class defines, and each one it
  takes from a class of stepstone's (not those of pydantic, ``Exception`` or
  the standard library, whose documentation is theirs).

Each of them is also rendered by a page of docs/reference/: the page has
``::: module`` (the whole module) or ``::: module.name``.

    python tools/check_docstrings.py     # exit 1 and one line per name, or 0

mkdocstrings renders a name without a docstring without a word of warning,
and leaves out a name no page asks for; this is the check that keeps the
reference whole. ``mkdocs build --strict``
catches the rest (a reference that names nothing, a broken link).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import griffe
from layout import ROOT, build_tree

TREE = ROOT / ".docs-tree"
REFERENCE = ROOT / "docs" / "reference"
PUBLIC_MODULES = ("stepstone", "stepstone.store", "stepstone.runtime", "stepstone.testing")
OURS = "stepstone"


def ours(obj: griffe.Object) -> bool:
    return obj.path.split(".")[0] == OURS


def public_members(cls: griffe.Class) -> Iterator[griffe.Object]:
    """The methods and properties a user calls on ``cls``: its own and those it
    inherits from stepstone's classes, public (no leading underscore; dunders
    other than ``__init__`` and ``__call__`` are Python's protocol)."""
    seen: set[str] = set()
    for name, member in {**cls.inherited_members, **cls.members}.items():
        if name in seen or (name.startswith("_") and name not in ("__call__",)):
            continue
        seen.add(name)
        try:
            target = member.final_target if isinstance(member, griffe.Alias) else member
        except griffe.AliasResolutionError:
            continue
        if not ours(target):
            continue
        if isinstance(target, griffe.Function) or (
            isinstance(target, griffe.Attribute) and "property" in target.labels
        ):
            yield target


def missing(module_name: str, loader: griffe.GriffeLoader) -> Iterator[str]:
    module = loader.modules_collection[module_name]
    names = module.exports or []
    for name in names:
        member = module.members.get(name)
        if member is None:
            yield f"{module_name}.{name}: in __all__ but not found"
            continue
        try:
            target = member.final_target if isinstance(member, griffe.Alias) else member
        except griffe.AliasResolutionError as error:
            yield f"{module_name}.{name}: cannot be resolved ({error})"
            continue
        where = f"{module_name}.{name}"
        if not target.docstring or not target.docstring.value.strip():
            yield f"{where} ({target.path}): no docstring"
        if isinstance(target, griffe.Class):
            for method in public_members(target):
                if not method.docstring or not method.docstring.value.strip():
                    yield f"{where}.{method.name} ({method.path}): no docstring"


def rendered() -> set[str]:
    """What the reference pages ask mkdocstrings for (``::: name`` lines)."""
    return {
        line.removeprefix(":::").split()[0]
        for page in REFERENCE.glob("*.md")
        for line in page.read_text().splitlines()
        if line.startswith("::: ")
    }


def unrendered(module_name: str, loader: griffe.GriffeLoader, pages: set[str]) -> Iterator[str]:
    if module_name in pages:
        return
    for name in loader.modules_collection[module_name].exports or []:
        if f"{module_name}.{name}" not in pages:
            yield (
                f"{module_name}.{name}: public, but no page of docs/reference/ renders it "
                f"(add '::: {module_name}.{name}' under its heading)"
            )


def main() -> int:
    build_tree(TREE)
    # As mkdocs.yml has it: a method that overrides a documented one (a
    # queue's ``claim``, a store's ``get``) shows the docstring it overrides.
    extensions = griffe.load_extensions("griffe_inherited_docstrings")
    loader = griffe.GriffeLoader(search_paths=[str(TREE)], extensions=extensions)
    for name in PUBLIC_MODULES:
        loader.load(name)
    loader.resolve_aliases(implicit=False, external=False)
    pages = rendered()
    found = sorted(
        {line for name in PUBLIC_MODULES for line in missing(name, loader)}
        | {line for name in PUBLIC_MODULES for line in unrendered(name, loader, pages)}
    )
    for line in found:
        print(line.replace(str(TREE) + "/", ""))
    if found:
        print(f"{len(found)} public names without a docstring or a page", file=sys.stderr)
        return 1
    print(f"every public name of {', '.join(PUBLIC_MODULES)} has a docstring and a page")
    return 0


if __name__ == "__main__":
    sys.exit(main())
