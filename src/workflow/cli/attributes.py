"""``--attr NAME=VALUE``: the attributes a command's runs must have."""

from __future__ import annotations

from collections.abc import Sequence

from stepstone.cli.errors import CliError
from stepstone.errors import InvalidAttribute
from stepstone.records.attributes import check_attributes


def parse_attributes(given: Sequence[str]) -> dict[str, str]:
    """The attributes ``--attr`` gave, each ``NAME=VALUE``, checked;
    CliError (status 2) naming the one that is not."""
    attributes: dict[str, str] = {}
    for text in given:
        name, equals, value = text.partition("=")
        if not equals:
            raise CliError(f"--attr {text[:80]!r}: expected NAME=VALUE", 2)
        if name in attributes and attributes[name] != value:
            raise CliError(f"--attr: {name[:40]!r} given twice, with two values", 2)
        attributes[name] = value
    try:
        return check_attributes(attributes, where="--attr")
    except InvalidAttribute as exc:
        raise CliError(str(exc), 2) from None
