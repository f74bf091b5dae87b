"""Durations as people type them: ``90s``, ``30m``, ``12h``, ``7d``, ``1h30m``.

``purge --older-than`` takes one; a plain number of seconds reads wrong in a
shell history, and ``7 days`` would need quoting.
"""

from __future__ import annotations

import re

from .errors import CliError

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``12h``, ``7d``, ``2w`` or a sum like ``1h30m``, in seconds."""
    compact = text.strip().lower().replace(" ", "")
    pos, total = 0, 0.0
    while pos < len(compact):
        match = _DURATION.match(compact, pos)
        if match is None:
            break
        total += float(match.group(1)) * _UNITS[match.group(2) or "s"]
        pos = match.end()
    if not compact or pos != len(compact):
        raise CliError(
            f"cannot read {text!r} as a duration (examples: 90s, 30m, 12h, 7d, 1h30m)", 2
        )
    return total
