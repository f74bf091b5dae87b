"""open_store: every URL form, and a clear StoreConfigError for every bad one."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from stepstone.store import FileStore, MemoryStore, SqliteStore, StoreConfigError, open_store
from stepstone.store.s3 import S3Store


async def test_memory_urls() -> None:
    store = open_store("memory://")
    assert isinstance(store, MemoryStore)
    assert store.location == "memory://"
    named = open_store("memory://jobs")
    assert named.location == "memory://jobs"
    assert open_store("memory://") is not store  # each call opens a fresh store


async def test_memory_clock_as_callable_or_clock_object() -> None:
    class Clock:
        def now(self) -> float:
            return 1234.0

    for clock in (Clock(), lambda: 1234.0):
        store = open_store("memory://", clock=clock)
        await store.put("k", b"x")
        assert (await store.head("k")).modified == 1234.0


def test_paths_and_file_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for directory in ("data/jobs", "abs", "as url", "f"):
        (tmp_path / directory).mkdir(parents=True)
    relative = open_store("data/jobs")
    assert isinstance(relative, FileStore)
    assert relative.root == str((tmp_path / "data" / "jobs").resolve())
    absolute = open_store(str(tmp_path / "abs"))
    assert isinstance(absolute, FileStore)
    assert absolute.location == f"file://{(tmp_path / 'abs').resolve()}"
    url = open_store(f"file://{tmp_path}/as%20url")
    assert isinstance(url, FileStore)
    assert url.root == str((tmp_path / "as url").resolve())
    flushed = open_store(f"file://{tmp_path}/f?sync=fsync")
    assert isinstance(flushed, FileStore) and flushed.sync_mode == "fsync"
    threaded = open_store(f"file://{tmp_path}/f?commit_in=thread")
    assert isinstance(threaded, FileStore) and threaded.commit_in == "thread"


def test_a_url_opens_an_existing_directory_and_creates_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An API process and a worker started in another directory must not each
    make a store of their own out of one relative path: the second is refused."""
    api, worker = tmp_path / "api", tmp_path / "worker"
    (api / "jobs").mkdir(parents=True)
    worker.mkdir()
    monkeypatch.chdir(api)
    assert open_store("jobs").root == str((api / "jobs").resolve())
    monkeypatch.chdir(worker)
    with pytest.raises(StoreConfigError, match="does not exist") as refused:
        open_store("jobs")
    assert f"relative to the working directory {str(worker)!r}" in str(refused.value)
    for same in (str(api / "jobs"), f"file://{api}/jobs"):
        assert open_store(same).root == str((api / "jobs").resolve())
    for missing in (str(tmp_path / "gone"), f"file://{tmp_path}/gone"):
        with pytest.raises(StoreConfigError, match="does not exist"):
            open_store(missing)
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(StoreConfigError, match="is not a directory"):
        open_store(f"file://{tmp_path}/file")
    assert list(worker.iterdir()) == []
    assert not (tmp_path / "gone").exists()


async def test_a_path_to_a_file_and_a_sqlite_url_open_a_sqlite_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    made = SqliteStore("data/jobs.db")  # in code, it makes its file (and directory)
    await made.put("k", b"x")
    await made.close()
    path = str((tmp_path / "data" / "jobs.db").resolve())
    for url in ("data/jobs.db", path, f"sqlite://{path}", f"sqlite://{tmp_path}/data/%6Aobs.db"):
        store = open_store(url)
        assert isinstance(store, SqliteStore), url
        assert (store.path, store.location) == (path, f"sqlite://{path}")
        assert (await store.get("k")).data == b"x"
        assert store.synchronous == "full"
        await store.close()
    relaxed = open_store(f"sqlite://{path}?synchronous=normal")
    assert isinstance(relaxed, SqliteStore) and relaxed.synchronous == "normal"
    await relaxed.close()


async def test_a_url_opens_an_existing_database_and_creates_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for missing in ("jobs.db", f"sqlite://{tmp_path}/jobs.db"):
        with pytest.raises(StoreConfigError, match="does not exist") as refused:
            open_store(missing)
        assert "touch" in str(refused.value)
    with pytest.raises(StoreConfigError, match="is not a file"):
        open_store(f"sqlite://{tmp_path}")
    assert os.listdir(tmp_path) == []
    (tmp_path / "jobs.db").write_bytes(b"")  # an empty file is an empty store
    store = open_store("jobs.db")
    assert isinstance(store, SqliteStore) and await store.list() == []
    await store.close()


def test_a_file_that_is_no_stepstone_database_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a database\n" * 100)
    with pytest.raises(StoreConfigError, match="not a database"):
        open_store(str(tmp_path / "notes.txt"))
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE accounts (id INTEGER)")
    conn.close()
    with pytest.raises(StoreConfigError, match="another application"):
        open_store(str(other))
    with sqlite3.connect(other) as conn:
        conn.execute("PRAGMA application_id = 7")
    conn.close()
    with pytest.raises(StoreConfigError, match="another application"):
        SqliteStore(other)
    assert [row for row in sqlite3.connect(other).execute("SELECT name FROM sqlite_master")] == [
        ("accounts",)
    ]


def test_s3_urls() -> None:
    store = open_store(
        "s3://bucket/some/prefix/?endpoint_url=http://localhost:9000&region=eu-west-1"
        "&retry_attempts=2&retry_base=0.5&retry_cap=3&connect_timeout=1.5"
    )
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix) == ("bucket", "some/prefix")
    assert store.location == "s3://bucket/some/prefix"
    assert (store.endpoint_url, store.region) == ("http://localhost:9000", "eu-west-1")
    assert (store.retry.attempts, store.retry.base, store.retry.cap) == (2, 0.5, 3.0)
    bare = open_store("s3://bucket")
    assert isinstance(bare, S3Store)
    assert (bare.prefix, bare.location, bare.endpoint_url) == ("", "s3://bucket", None)
    assert bare.send_rates is not None and not bare.send_rates.hot.every_object


def test_a_store_that_limits_each_object_is_told_so_in_its_url() -> None:
    store = open_store("s3://gcs-bucket?endpoint_url=https://storage.example&object_turns=true")
    assert isinstance(store, S3Store) and store.send_rates is not None
    assert store.send_rates.hot.every_object
    # Every store of the process on that bucket paces each object from then on.
    other = open_store("s3://gcs-bucket/other?endpoint_url=https://storage.example")
    assert isinstance(other, S3Store) and other.send_rates is store.send_rates
    with pytest.raises(StoreConfigError, match="adaptive=False"):
        S3Store("gcs-bucket", adaptive=False, object_turns=True)


BAD_URLS = [
    "",
    "   ",
    "ftp://host/x",
    "s3://",
    "s3:///prefix",
    "s3://bucket?endpont_url=http://x",
    "s3://bucket?retry_attempts=many",
    "s3://bucket?retry_attempts=0",
    "s3://bucket?region=a&region=b",
    "s3://bucket?object_turns=sometimes",
    "s3://bucket/../up",
    "file://otherhost/x",
    "file://",
    "file:///x?sync=sometimes",
    "file:///x?fsync=1",
    "file:///x?sync=fsync&sync=auto",
    "file:///x?commit_in=elsewhere",
    "sqlite://otherhost/x.db",
    "sqlite://",
    "sqlite:///x.db?synchronous=off",
    "sqlite:///x.db?mode=rwc",
    "memory://name/with/path",
    "memory://?x=1",
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_bad_urls_are_config_errors_naming_the_url(url: str) -> None:
    with pytest.raises(StoreConfigError) as caught:
        open_store(url)
    assert repr(url) in str(caught.value)


async def test_s3_url_opens_a_working_store(s3_url: str) -> None:
    store = open_store(s3_url)
    await store.put("k", b"x")
    assert (await store.get("k")).data == b"x"
    await store.close()
