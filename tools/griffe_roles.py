"""Griffe extension (mkdocs.yml): the docstrings are reStructuredText, the
reference renders Markdown. Show the roles they use (``:class:`Job```,
``:func:`~stepstone.open_store```, ...) as the code they name, a paragraph
ending in ``::`` as one ending in ``:``, and an interpreter session
(``>>>`` lines) as a Python code block. Names are shown, not linked: a role
may name a module the reference does not render."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj):`(~?)([^`]+)`")
LITERAL_BLOCK = re.compile(r"(?<=\S)::$", re.MULTILINE)
SESSION = re.compile(r"^(?:>>>|\.\.\.)(?: |$)")


def sessions(text: str) -> str:
    """Each run of ``>>>`` and ``...`` lines fenced as Python, prompts dropped."""
    out: list[str] = []
    inside = False
    for line in text.split("\n"):
        prompt = SESSION.match(line)
        if prompt and not inside:
            out.append("```python")
            inside = True
        elif not prompt and inside:
            out.append("```")
            inside = False
        out.append(line[prompt.end() :] if prompt else line)
    if inside:
        out.append("```")
    return "\n".join(out)


def plain(text: str) -> str:
    """``text`` with each role as inline code (``~`` keeps the last name)."""

    def code(match: re.Match[str]) -> str:
        name = match[2]
        return f"`{name.rsplit('.', 1)[-1] if match[1] else name}`"

    return sessions(LITERAL_BLOCK.sub(":", ROLE.sub(code, text)))


class Roles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **_: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain(obj.docstring.value)
