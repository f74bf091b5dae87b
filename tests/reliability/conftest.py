"""What the reliability tests share besides their helper modules."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["files", "s3"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the store is: a directory, or an S3 URL on the moto server."""
    if request.param == "files":
        return str(tmp_path / "store")
    url: str = request.getfixturevalue("s3_url")
    return url
