"""Helpers shared by the workflow tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from stepstone import testing

ON_EVERY_STORE = pytest.mark.parametrize(
    "make_runner", ["memory-queue", "store-queue", "files", "s3"], indirect=True
)
"""A module's scenarios also on a FileStore and on S3 (moto), each with the
default StoreQueue (``pytestmark = ON_EVERY_STORE``; see conftest.make_runner)."""


async def wait_until(
    cond: Callable[[], bool | Awaitable[bool]],
    timeout: float = 30.0,  # noqa: ASYNC109 - a deadline that fails the test
) -> None:
    """Poll ``cond`` until true; fail the test with a clear message at the deadline."""
    await testing.wait_until(cond, timeout=timeout)
