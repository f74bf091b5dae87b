"""Shared fixtures: S3 (moto's server on a local port, and a real server
where ``STEPSTONE_TEST_S3_URL`` names one: tests/real_s3.py), one store of
each kind, and a real headless browser.

The browser is Debian's ``chromium`` driven through ``chromedriver``
(packages chromium and chromium-driver; .ci/run installs them). Without
them the browser tests fail when ``CI`` is set, since CI must run them, and
skip otherwise, saying what to install.

Names here are used across the suite (store, runtime, workflow); keep them.

moto's server answers on a thread pool and checks a conditional write's
precondition and applies it in two steps, so in principle two racing
conditional PUTs could both pass; real S3 applies them atomically. The server
here therefore takes a lock around object writes (PUT and DELETE), which makes
moto hold S3's guarantee by construction rather than by the GIL's luck,
without serialising reads or SQS (whose long polls would block).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from real_s3 import RealS3, missing, real_s3_from_setting

from stepstone.store import FileStore, MemoryStore, ObjectStore, SqliteStore
from stepstone.testing import moto_server as run_moto_server


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """moto's S3/SQS server on a free local port for the whole session; yields its URL.

    The same server the user-facing test kit starts (stepstone.testing.moto_server):
    fake credentials in the environment, object writes serialised as S3 applies
    conditional writes.
    """
    with run_moto_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def s3_admin(moto_server: str) -> Any:
    """A synchronous boto3 S3 client on the moto server, for setting up and inspecting."""
    import boto3

    return boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")


@pytest.fixture
def s3_bucket(s3_admin: Any) -> str:
    """A fresh, uniquely named, empty bucket on the moto server."""
    name = f"stepstone-test-{uuid.uuid4().hex[:16]}"
    s3_admin.create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_url(moto_server: str, s3_bucket: str) -> str:
    return f"s3://{s3_bucket}/t?endpoint_url={moto_server}&region=us-east-1"


@pytest.fixture(scope="session")
def real_s3(tmp_path_factory: pytest.TempPathFactory) -> RealS3:
    """The real S3 server ``STEPSTONE_TEST_S3_URL`` names (CI: a Ceph RADOS
    Gateway, tools/rgw.py). Without it the test skips, or fails under CI."""
    try:
        server = real_s3_from_setting(tmp_path_factory.mktemp("real-s3"))
    except Exception as exc:
        pytest.fail(missing(f"the server could not be used ({exc})"))
    if server is None:
        if os.environ.get("CI"):
            pytest.fail(missing("the setting is not set; CI starts one (.ci/run)"))
        pytest.skip(missing("the setting is not set"))
    return server


@pytest.fixture
def real_s3_url(real_s3: RealS3, request: pytest.FixtureRequest) -> Iterator[str]:
    """A store URL on the real server, under a prefix of this test's own
    (removed after it)."""
    prefix = f"t-{uuid.uuid4().hex[:16]}"
    yield real_s3.url(prefix)
    real_s3.remove(prefix)


@pytest.fixture(params=["moto", "real"])
def both_s3_url(request: pytest.FixtureRequest) -> str:
    """A store URL on moto, then on the real server: a test of both."""
    url: str = request.getfixturevalue("s3_url" if request.param == "moto" else "real_s3_url")
    return url


@pytest.fixture
def memory_store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
async def file_store(tmp_path: Path) -> AsyncIterator[FileStore]:
    store = FileStore(tmp_path / "store")
    yield store
    await store.close()


@pytest.fixture
async def file_process_store(tmp_path: Path) -> AsyncIterator[FileStore]:
    """A FileStore committing every batch in its helper process."""
    store = FileStore(tmp_path / "store", commit_in="process")
    yield store
    await store.close()


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "jobs.db")
    yield store
    await store.close()


@pytest.fixture
async def s3_store(s3_url: str) -> AsyncIterator[ObjectStore]:
    from stepstone.store import open_store

    store = open_store(s3_url)
    yield store
    await store.close()


@pytest.fixture
async def real_s3_store(real_s3_url: str) -> AsyncIterator[ObjectStore]:
    from stepstone.store import open_store

    store = open_store(real_s3_url)
    yield store
    await store.close()


PAGE_LOAD = 30.0
"""Seconds a page may take to load in the browser."""


def _browser_missing(what: str) -> None:
    message = (
        f"{what}: the browser tests need Debian's chromium and chromium-driver "
        "(apt-get install -y chromium chromium-driver) and selenium (the test extra)"
    )
    if os.environ.get("CI"):
        pytest.fail(message + "; CI installs them (.ci/run), so this run is broken")
    pytest.skip(message)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """Headless Chromium through chromedriver, on a fresh profile."""
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        _browser_missing("chromium or chromedriver is not installed")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _browser_missing("selenium is not installed")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1280,860",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(PAGE_LOAD)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(params=["memory", "file", "file_process", "sqlite", "s3", "real_s3"])
def any_store(request: pytest.FixtureRequest) -> ObjectStore:
    """The same test against every backend."""
    store: ObjectStore = request.getfixturevalue(f"{request.param}_store")
    return store
