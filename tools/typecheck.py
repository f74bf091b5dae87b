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
import subprocess
import sys

from layout import ROOT, build_tree, package_dirs

TREE = ROOT / ".typecheck"


def main(argv: list[str]) -> int:
    packages = package_dirs()
    where = build_tree(TREE, packages)
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
