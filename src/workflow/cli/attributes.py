"""``--attr NAME=VALUE`` as the CLI reads it (:mod:`stepstone.ops.attribute_filter`):
one it cannot read is a usage error, reported in one line with exit status 2."""

from __future__ import annotations

from collections.abc import Sequence

from stepstone.cli.errors import CliError
from stepstone.ops import attribute_filter


def parse_attributes(given: Sequence[str]) -> dict[str, str]:
    """The attributes ``--attr`` gave, each ``NAME=VALUE``, checked;
    CliError (status 2) naming the one that is not."""
    try:
        return attribute_filter.parse_attributes(given, where="--attr")
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
