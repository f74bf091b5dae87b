"""Worker records as a worker elsewhere would write them
(:mod:`stepstone.runtime.worker.presence`), for the tests of what reads them."""

from __future__ import annotations

import time
from pathlib import Path

import msgpack

from stepstone.runtime.worker.presence import holder_digest


def record(worker_id: str, **changes: object) -> tuple[str, bytes]:
    """A live worker's record (``changes`` replace its fields): its key and bytes."""
    body: dict[str, object] = {
        "v": 1,
        "id": worker_id,
        "host": "ip-10-0-1-17",
        "pid": 4242,
        "life": "00aa",
        "concurrency": 16,
        "held": 0,
        "runs": [],
        "started": time.time() - 7200,
        "beat": time.time(),
        "every": 30.0,
        "stopped": None,
    }
    body.update(changes)
    holder = f"{worker_id}@{body['host']}"
    return f"workers/{holder_digest(holder)}/{body['life']}", msgpack.packb(body, use_bin_type=True)


def put_record(store: Path, worker_id: str, **changes: object) -> str:
    """Write :func:`record` into a directory store; its key."""
    key, data = record(worker_id, **changes)
    path = store / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return key
