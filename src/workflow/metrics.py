"""Deprecated: import from :mod:`stepstone.telemetry` instead."""

import warnings

from stepstone.telemetry import *  # noqa: F403
from stepstone.telemetry import __all__ as __all__

warnings.warn(
    "stepstone.metrics is deprecated: import from stepstone.telemetry",
    DeprecationWarning,
    stacklevel=2,
)
