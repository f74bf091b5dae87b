"""Deprecated: import from :mod:`stepstone.telemetry` instead."""

import warnings

from stepstone.telemetry import *  # noqa: F403
from stepstone.telemetry import __all__ as __all__

warnings.warn(
    "stepstone.observability is deprecated: import from stepstone.telemetry",
    DeprecationWarning,
    stacklevel=2,
)
