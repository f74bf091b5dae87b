"""The package's build backend: setuptools', less one notice.

An editable install of a package whose directories are mapped onto its
import names (``src/workflow`` is ``stepstone``; pyproject.toml) is made by
setuptools with an import hook, and setuptools says so with a warning
(``InformationOnly``: "Editable installation. Please be careful with
folders in your working directory...") that pip prints even under ``-q``.
It tells a user of this project nothing to do, so the README's install
commands are quiet: this backend is setuptools' own (``build_meta``), with
that one warning filtered out while an editable wheel is built. Every
other message, and every hook, is setuptools'.
"""

from __future__ import annotations

import warnings
from typing import Any

from setuptools import build_meta
from setuptools.build_meta import (
    build_sdist,
    build_wheel,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """setuptools' ``build_editable``, without its notice that it installs
    through an import hook (the module docstring says why)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"\s*Editable installation\.")
        built: str = build_meta.build_editable(wheel_directory, config_settings, metadata_directory)
    return built
