"""What a store without a conditional delete costs: requests per job on the wire.

    python -m benchmarks.deletes [--jobs 200] [--repeat 2]

Runs keyed W3 jobs (three memoized steps, submitted at once, one in-process
runner with its worker, concurrency 16) on S3 three ways, interleaved:

- ``moto``: moto's S3, whose DeleteObject holds If-Match (as AWS's does):
  a fenced delete (an ack, a slot's or a marker's removal) is one DELETE;
- ``moto-husks``: the same server, the store told
  ``conditional_delete=false``: every fenced delete is a fenced swap to a
  husk, then a DELETE (stepstone.store.s3.husks);
- ``rgw``: the real server ``STEPSTONE_TEST_S3_URL`` names (tools/rgw.py:
  Ceph RGW 16, which ignores If-Match on DeleteObject, so husks too,
  found out by the store's probe; etags sent bare, found out).

Requests are counted as sent, by S3 operation and whether conditional
(botocore's ``before-call`` event on the process's session): what a
provider bills, the store's own probes and look-ups included, which a
CountingStore (the contract's calls) cannot see.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections import Counter
from typing import Any

from stepstone import JobRunner
from stepstone.store.s3 import S3Store, sessions

from .jobs import W3_JOBS, w3_job
from .moto_server import MotoServer

SENT: Counter[str] = Counter()


def _count(model: Any, params: Any, **_: Any) -> None:
    headers = params.get("headers", {}) if isinstance(params, dict) else {}
    conditional = any(h in headers for h in ("If-Match", "If-None-Match"))
    SENT[f"{model.name}{' (conditional)' if conditional else ''}"] += 1


def _store(config: str, moto: MotoServer) -> S3Store:
    if config == "rgw":
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
        import tempfile
        from pathlib import Path

        from real_s3 import real_s3_from_setting

        server = real_s3_from_setting(Path(tempfile.mkdtemp()))
        if server is None:
            raise SystemExit("rgw: set STEPSTONE_TEST_S3_URL (python tools/rgw.py start)")
        return S3Store(
            server.bucket,
            f"bench-{uuid.uuid4().hex[:8]}",
            endpoint_url=server.endpoint,
            region=server.query.get("region"),
            profile=server.query.get("profile"),
        )
    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    moto.create_bucket(bucket)
    return S3Store(
        bucket,
        "b",
        endpoint_url=moto.url,
        region="us-east-1",
        conditional_delete=False if config == "moto-husks" else None,
    )


async def run_one(config: str, moto: MotoServer, jobs: int, tag: str) -> dict[str, Any]:
    store = _store(config, moto)
    runner = JobRunner(store, jobs=W3_JOBS, concurrency=16, retry_backoff=0.0)
    SENT.clear()
    start = time.perf_counter()
    async with runner:
        handles = await asyncio.gather(
            *(runner.submit(w3_job("", n=n, steps=3, tag=tag)) for n in range(jobs))
        )
        await asyncio.gather(*(h.result(timeout=600) for h in handles))
    took = time.perf_counter() - start
    await store.close()
    return {"config": config, "jobs": jobs, "seconds": took, "sent": dict(SENT)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--configs", default="moto,moto-husks,rgw")
    args = parser.parse_args()
    sessions.session(None).register("before-call.s3", _count)
    if "STEPSTONE_TEST_S3_URL" in os.environ:
        sessions.session("stepstone-test").register("before-call.s3", _count)
    configs = args.configs.split(",")
    moto = MotoServer()
    with moto:
        for round_ in range(args.repeat):
            for config in configs:
                tag = f"{config}-{round_}"
                result = asyncio.run(run_one(config, moto, args.jobs, tag))
                per_job = {k: v / args.jobs for k, v in sorted(result["sent"].items())}
                total = sum(result["sent"].values()) / args.jobs
                shown = ", ".join(f"{k} {v:.2f}" for k, v in per_job.items())
                print(
                    f"round {round_ + 1} {config}: {total:.2f} requests/job "
                    f"({args.jobs / result['seconds']:.1f} jobs/s): {shown}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
