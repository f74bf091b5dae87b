"""A copied bucket is a store you can inspect: runs on S3 (moto), the prefix
copied object by object into a directory as ``aws s3 sync`` copies it, and
``stepstone ls``, ``show`` and ``stats`` on the directory answer with every
run; with the copy's mark in it, a worker refuses to start there."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from cli_app import Boom, Greet
from cli_support import Cli
from test_worker_store_check import refused_at_start, start_worker

from stepstone import JobFailed, JobRunner

pytestmark = pytest.mark.slow


def sync(s3_admin: Any, bucket: str, prefix: str, into: Path) -> int:
    """``aws s3 sync s3://bucket/prefix into``: each object to the file at its
    key below the prefix; returns how many were copied."""
    copied = 0
    for page in s3_admin.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=prefix + "/"
    ):
        for item in page.get("Contents", []):
            path = into / item["Key"][len(prefix) + 1 :]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(s3_admin.get_object(Bucket=bucket, Key=item["Key"])["Body"].read())
            copied += 1
    return copied


@pytest.fixture
def copied(
    s3_url: str, s3_admin: Any, s3_bucket: str, tmp_path: Path, cli_dir: Path
) -> tuple[Path, dict[str, str]]:
    """Three runs on S3 (two succeeded, one failed for good and left dead in
    the queue), then the bucket's prefix copied into a directory; returns it
    and each run's status by id, as ``ls`` shows it."""

    async def run() -> dict[str, str]:
        statuses = {}
        async with JobRunner(s3_url, jobs=[Greet, Boom], poll_interval=0.05) as runner:
            for name in ("ada", "grace"):
                handle = await runner.submit(Greet(name=name))
                assert await asyncio.wait_for(handle, 60) == f"hello {name}"
                statuses[handle.id] = "succeeded"
            handle = await runner.submit(Boom(n=1))
            with pytest.raises(JobFailed):
                await asyncio.wait_for(handle, 60)
            statuses[handle.id] = "dead"
        return statuses

    statuses = asyncio.run(run())
    copy = tmp_path / "copy"
    copy.mkdir()
    assert sync(s3_admin, s3_bucket, "t", copy) > 3
    return copy, statuses


def test_a_copied_bucket_answers_ls_show_and_stats(
    cli: Cli, copied: tuple[Path, dict[str, str]]
) -> None:
    copy, statuses = copied
    listed = cli("ls", "--store", str(copy), "--json")
    assert listed.status == 0, listed
    assert {row["id"]: row["status"] for row in listed.json()["runs"]} == statuses
    for run_id in statuses:
        shown = cli("show", run_id[:12], "--store", str(copy), "--json")
        assert shown.status == 0, shown
        assert shown.json()["id"] == run_id
    stats = cli("stats", "--store", str(copy), "--json")
    assert stats.status == 0, stats
    counted = stats.json()["outcomes"]
    assert counted["succeeded"] == 2 and counted["failed"] == 1


def test_a_worker_refuses_a_store_marked_as_a_copy(
    copied: tuple[Path, dict[str, str]], cli_env: dict[str, str]
) -> None:
    copy, _ = copied
    (copy / "stepstone-copy").write_text("s3://orders/jobs copied 2026-12-02T01:00Z\n")
    refused_at_start(start_worker(cli_env, str(copy)), "marked as a copy", "s3://orders/jobs")
