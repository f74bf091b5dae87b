"""The web view over a bucket whose payloads are encrypted: without the key
a run's page shows what sealed each value (``<encrypted (key k1)>``) and
never the plain text, and serves every page; given the codecs and keys by
the environment, it shows the values. So too the text of a run's errors,
sealed by a runner that seals them (``seal_errors``)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import ClassVar

import pytest
from test_pages import get
from ui_kit import serve

from stepstone import AesGcmCodec, Job, JobContext, JobFailed, JobRunner, ZstdCodec

MARKER = "wombat-55e1-marker"
K1 = base64.b64encode(bytes(range(7, 39))).decode()


class Sealed(Job[str]):
    NAME: ClassVar[str] = "ui.sealed"
    text: str

    async def run(self, ctx: JobContext) -> str:
        said = await ctx.step("say", _say, self.text)
        await ctx.stream("out").write(f"item {self.text}")
        return f"result {said}"


class Declines(Job[str]):
    NAME: ClassVar[str] = "ui.declines"
    card: str

    async def run(self, ctx: JobContext) -> str:
        raise ValueError(f"card {self.card} declined")


async def _say(text: str) -> str:
    return f"step {text}"


@pytest.fixture
async def sealed_run(tmp_path: Path) -> tuple[str, str]:
    store = tmp_path / "bucket"
    store.mkdir()
    codec = [ZstdCodec(), AesGcmCodec({"k1": K1})]
    async with JobRunner(str(store), jobs=[Sealed], codec=codec) as runner:
        handle = await runner.submit(Sealed(text=MARKER))
        assert await handle.result(timeout=30) == f"result step {MARKER}"
    return str(store), handle.id


def test_without_the_key_a_run_page_says_what_sealed_each_value(
    sealed_run: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, run_id = sealed_run
    for name in ("STEPSTONE_CODEC", "STEPSTONE_KEYS", "STEPSTONE_KEYS_FILE"):
        monkeypatch.delenv(name, raising=False)
    with serve(store, tmp_path) as url:
        for path in ("", f"runs/{run_id}", "?state=succeeded"):
            status, _, html = get(url + path)
            assert status == 200, html
            assert MARKER not in html
        _, _, page = get(url + f"runs/{run_id}")
    assert "&lt;encrypted (key k1), compressed (zstd)&gt;" in page


def test_given_the_codecs_and_keys_the_page_shows_the_values(
    sealed_run: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, run_id = sealed_run
    monkeypatch.setenv("STEPSTONE_CODEC", "zstd,aes-gcm")
    monkeypatch.setenv("STEPSTONE_KEYS", f"k1={K1}")
    with serve(store, tmp_path) as url:
        status, _, page = get(url + f"runs/{run_id}")
    assert status == 200, page
    assert f"step {MARKER}" in page and f"result step {MARKER}" in page
    assert "encrypted (key" not in page


@pytest.fixture
async def failed_run(tmp_path: Path) -> tuple[str, str]:
    """A run that failed after a retry, its errors' texts sealed."""
    store = tmp_path / "bucket"
    store.mkdir()
    codec = [AesGcmCodec({"k1": K1})]
    runner = JobRunner(
        str(store), jobs=[Declines], codec=codec, seal_errors=True, max_attempts=2, retry_backoff=0
    )
    async with runner:
        handle = await runner.submit(Declines(card=MARKER))
        with pytest.raises(JobFailed, match=MARKER):
            await handle.result(timeout=30)
    return str(store), handle.id


@pytest.mark.parametrize("key", [False, True], ids=["without the key", "with the key"])
def test_a_failed_runs_sealed_errors_show_as_encrypted_or_as_they_were(
    failed_run: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: bool
) -> None:
    store, run_id = failed_run
    for name in ("STEPSTONE_CODEC", "STEPSTONE_KEYS", "STEPSTONE_KEYS_FILE"):
        monkeypatch.delenv(name, raising=False)
    if key:
        monkeypatch.setenv("STEPSTONE_CODEC", "aes-gcm")
        monkeypatch.setenv("STEPSTONE_KEYS", f"k1={K1}")
    with serve(store, tmp_path) as url:
        pages = [get(url + path) for path in ("", f"runs/{run_id}", "?state=dead")]
    for status, _, html in pages:
        assert status == 200, html
        assert (MARKER in html) is key
        assert ("&lt;encrypted (key k1)&gt;" in html) is not key
    run_page = pages[1][2]
    assert "ValueError" in run_page  # (the exception's class stays readable)
