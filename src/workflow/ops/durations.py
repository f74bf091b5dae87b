"""Durations as people type them: ``90s``, ``30m``, ``12h``, ``7d``, ``1h30m``.

``purge --older-than`` takes one, and ``--since`` one or a time (in the CLI
and in the web view's filters); a plain number of seconds reads wrong in a
shell history, and ``7 days`` would need quoting. What cannot be read raises
ValueError saying what was expected.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

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
        raise ValueError(f"cannot read {text!r} as a duration (examples: 90s, 30m, 12h, 7d, 1h30m)")
    return total


def parse_since(text: str, now: float) -> float:
    """``--since``: a duration before ``now`` (``10m``, ``2h``, ``3d``) or an
    ISO 8601 time (``2026-01-31``, ``2026-01-31T12:00``, UTC unless it says
    otherwise), as an epoch time."""
    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"cannot read {text!r} as a duration or a time "
            "(examples: 10m, 2h, 3d, 2026-01-31, 2026-01-31T12:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
