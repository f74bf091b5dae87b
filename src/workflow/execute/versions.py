"""Code versions: which code recorded a run's calls, for rolling deploys.

Each memo of a run's history names the **code version** of the worker that
recorded it (:func:`code_version`): the build id the worker was given
(``JobRunner(build_id=...)``, ``stepstone worker --build-id``, or the
``STEPSTONE_BUILD_ID`` environment variable), else the job type's
``VERSION``, else a digest of the source of the module that defines the job
type. In a rolling deploy old and new code claim the same runs for a while;
when a worker cannot replay a run because another version of the code
recorded the call it diverges at, the run is not failed: it is given back,
uncounted, waiting for a worker of that version
(:attr:`~stepstone.JobStatus.WAITING_FOR_VERSION`), for up to a window
(``JobRunner(version_wait=...)``) counted from the first worker that could
not replay it, which is kept in the run's memos (``!version@<place>``).
"""

from __future__ import annotations

import hashlib
import inspect
import os
from typing import Any

from stepstone.execute.scope import AttemptScope
from stepstone.records.calls import VERSION_WAIT_MEMO
from stepstone.records.codec import pack, unpack
from stepstone.store import AlreadyExists

BUILD_ID_VARIABLE = "STEPSTONE_BUILD_ID"
"""The environment variable a worker's build id is read from when none is given."""
VERSION_WAIT = 3600.0
"""Seconds a run that a worker cannot replay waits, by default, for a worker
of the code version that last advanced it before it fails for good."""
RECHECK = 60.0
"""Longest such a run stays given back before a worker tries it again."""


def build_id_from(given: str | None) -> str | None:
    """The build id a worker runs as: ``given``, else the environment's."""
    if given is not None:
        if not isinstance(given, str) or not given.strip():
            raise ValueError("a build id is a non-empty str")
        return given
    return os.environ.get(BUILD_ID_VARIABLE) or None


def code_version(job_type: type[Any], build_id: str | None) -> str:
    """The version of ``job_type``'s code this worker runs (see the module docstring)."""
    if build_id is not None:
        return build_id
    declared = getattr(job_type, "VERSION", None)
    if isinstance(declared, str) and declared:
        return declared
    try:
        source = inspect.getsourcefile(job_type)
        with open(source or "", "rb") as file:
            digest = hashlib.sha256(file.read()).hexdigest()
    except (OSError, TypeError):
        return "unknown"
    return f"src-{digest[:12]}"


def waiting_for(version: str) -> str:
    """What a run waiting for a worker of ``version`` shows."""
    return f"a worker that can replay it (last advanced by version {version})"


async def waiting_since(scope: AttemptScope, version: str, at: str, now: float) -> float:
    """When the run began to wait for a worker of ``version`` at the place
    ``at`` (a memo's key segment): ``now`` the first time, and again when it
    waited there for another version before."""
    key = scope.layout.memo(scope.run_id, scope.incarnation, f"{VERSION_WAIT_MEMO}{at}")
    mark = pack({"for": version, "since": now})
    try:
        await scope.store.put_if_absent(key, mark)
        return now
    except AlreadyExists:
        pass
    try:
        found = unpack((await scope.store.get(key)).data)
        if found["for"] == version and isinstance(found["since"], int | float):
            return float(found["since"])
    except Exception:  # (unreadable, or gone: start counting again)
        pass
    await scope.store.put(key, mark)
    return now
