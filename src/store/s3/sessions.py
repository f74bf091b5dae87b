"""botocore sessions, one per profile, shared by every S3Store in the process.

A session loads the service model and resolves credentials once, which is
slow next to making a client (docs/performance.md, "Known costs"); clients,
which belong to an event loop, are made from it per loop (``S3Store._client``).
aiobotocore is imported on first use, so ``import stepstone.store`` stays fast.
"""

from __future__ import annotations

from typing import Any

_SESSIONS: dict[str | None, Any] = {}


def session(profile: str | None) -> Any:
    """The process's botocore session for ``profile`` (None: the default)."""
    from aiobotocore.session import AioSession

    found = _SESSIONS.get(profile)
    if found is None:
        found = _SESSIONS[profile] = AioSession(profile=profile)
    return found
