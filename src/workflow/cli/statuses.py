"""The exit statuses of the ``stepstone`` command, one name each.

A script tells the outcomes apart by these alone, so a partial bulk action
has one of its own: it did part of what was asked, which is neither the
success of 0 nor the failure of 1 that did nothing (docs/operations.md
tabulates them).
"""

from __future__ import annotations

OK = 0
"""The command did all it was asked."""
FAILED = 1
"""It failed, saying why in one line (an unknown id, a bad URL, a store that
refused, a job in the wrong state, a bulk action not confirmed), and did nothing."""
USAGE = 2
"""A usage mistake: an option it does not take, arguments that do not go together."""
PARTIAL = 3
"""A bulk action (``retry``, ``cancel``, ``replay`` by filter) did some of the
runs it chose and could not touch the others: refused, or their records
would not decode. It said how many, and which."""
INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT)."""
CLOSED_PIPE = 141
"""Its reader stopped reading (``stepstone ls | head``): 128 + SIGPIPE."""
