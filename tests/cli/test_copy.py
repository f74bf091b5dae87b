"""``stepstone copy SRC DST``: a bucket's runs (moto S3) copied into a SQLite
file answer ``ls``, ``show`` and ``stats`` there, and a worker refuses the
marked copy; copied on into a directory and back into another bucket, every
object arrives with its bytes; and what cannot be copied fails in one line."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from cli_app import Boom, Greet
from cli_support import Cli
from test_worker_store_check import refused_at_start, start_worker

from stepstone import JobFailed, JobRunner
from stepstone.store import ObjectStore, open_store

pytestmark = pytest.mark.slow


async def contents(store: ObjectStore) -> dict[str, bytes]:
    """Every object of ``store``, by key (the store is closed after)."""
    try:
        return {info.key: (await store.get(info.key)).data async for info in store.scan()}
    finally:
        await store.close()


@pytest.fixture
def runs_on_s3(s3_url: str, cli_dir: Path) -> dict[str, str]:
    """Two runs that succeeded and one that failed for good on S3; each
    one's status by id, as ``ls`` shows it."""

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

    return asyncio.run(run())


def test_a_bucket_copied_into_a_sqlite_file_answers_ls_show_and_stats(
    cli: Cli,
    s3_url: str,
    runs_on_s3: dict[str, str],
    tmp_path: Path,
    cli_env: dict[str, str],
) -> None:
    copy = tmp_path / "offline" / "copy.db"  # (neither the file nor its directory exists)
    done = cli("copy", s3_url, str(copy), "--mark", "--json")
    assert done.status == 0, done
    report = done.json()
    assert report["objects"] >= 3 + 3 * 2  # (and the attempt history, the workers' records)
    listed = cli("ls", "--store", str(copy), "--json")
    assert listed.status == 0, listed
    assert {row["id"]: row["status"] for row in listed.json()["runs"]} == runs_on_s3
    for run_id in runs_on_s3:
        shown = cli("show", run_id[:12], "--store", str(copy), "--json")
        assert shown.status == 0, shown
        assert shown.json()["id"] == run_id
    counted = cli("stats", "--store", str(copy), "--json").json()["outcomes"]
    assert counted["succeeded"] == 2 and counted["failed"] == 1
    refused_at_start(start_worker(cli_env, str(copy)), "marked as a copy", s3_url.split("?")[0])


def test_a_copy_goes_on_into_a_directory_and_back_into_a_bucket_whole(
    cli: Cli, s3_url: str, s3_admin: Any, runs_on_s3: dict[str, str], tmp_path: Path
) -> None:
    file_copy, directory_copy = tmp_path / "copy.sqlite3", tmp_path / "copy"
    back = s3_url.replace("/t?", "/back?")
    for source, destination in ((s3_url, file_copy), (file_copy, directory_copy)):
        done = cli("copy", str(source), str(destination))
        assert done.status == 0, done
        assert done.out.startswith("copied "), done
    assert directory_copy.is_dir()
    assert cli("copy", f"file://{directory_copy}", back).status == 0
    original = asyncio.run(contents(open_store(s3_url)))
    assert len(original) > 3
    for copied in (file_copy, directory_copy, back):
        assert asyncio.run(contents(open_store(str(copied)))) == original, copied


def test_what_cannot_be_copied_fails_in_one_line(cli: Cli, tmp_path: Path) -> None:
    missing = cli("copy", str(tmp_path / "nothing.db"), str(tmp_path / "to.db"))
    assert missing.status == 1 and "does not exist" in missing.err, missing
    assert "Traceback" not in missing.err and not (tmp_path / "to.db").exists()
    (tmp_path / "same.db").write_bytes(b"")
    same = cli("copy", str(tmp_path / "same.db"), f"sqlite://{tmp_path}/same.db")
    assert same.status == 2 and "the same store" in same.err, same
