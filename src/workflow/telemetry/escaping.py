"""Control characters made visible before text reaches an operator's terminal or log.

Much of what ``stepstone`` prints was written by jobs: an exception's message,
a step's name, a result, a progress value. A message holding an escape
sequence (``\\x1b[2J`` clears the screen), a carriage return or a newline
could clear an operator's terminal, rewrite a line of ``stepstone ls`` or
forge a line of the worker's log. :func:`escape_controls` writes every such
character as its Python escape (``\\x1b``, ``\\r``, ``\\u202e``), so the
text reads the same and does nothing.

The CLI's tables and ``show``, its error lines, and the text log formatter
(:mod:`stepstone.telemetry.logs`) all go through it; JSON output needs none
(JSON escapes control characters itself).
"""

from __future__ import annotations

import re

_CONTROL_CHARS = (
    "\x00-\x1f\x7f-\x9f"  # C0 and C1 controls, DEL
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidirectional marks and overrides
    "\u2028\u2029"  # line and paragraph separators
)
_CONTROLS = re.compile(f"[{_CONTROL_CHARS}]")
_CONTROLS_BUT_NEWLINE = re.compile(f"(?!\n)[{_CONTROL_CHARS}]")

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")


def escape_controls(text: str, *, newlines: bool = False) -> str:
    """``text`` with control characters written as escapes (``\\x1b``, ``\\n``,
    ``\\u202e``); with ``newlines``, line breaks are kept (a traceback's lines),
    every other control character escaped."""
    pattern = _CONTROLS_BUT_NEWLINE if newlines else _CONTROLS
    if pattern.search(text) is None:
        return text
    return pattern.sub(_escaped, text)
