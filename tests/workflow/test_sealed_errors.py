"""Error texts sealed (``JobRunner(seal_errors=True)``): a failed run's
message and traceback, each failed attempt's, and the queue's last error
hold no plain text in the bucket; whoever holds the key reads them as they
were (``handle.result()``, ``runner.status``, ``runner.history``, ``stepstone
show``); whoever does not is told ``encrypted (key k1)``, and no command
fails for it. Without the option the same runs leave their texts readable
(the check can fail), and texts written before it was set read as they are.

On a real directory store and on moto's S3: one run fails for good after a
retry (its attempt records, its outcome, its dead queue record), another
waits for its retry (its queue record's last error, its attempt record).
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from test_payload_codecs import _cli as cli_on

from stepstone import AesGcmCodec, Job, JobContext, JobFailed, JobRunner, RetryLater
from stepstone.records.error_texts import ErrorSealing, open_text
from stepstone.records.payloads import Payloads
from stepstone.store import open_store
from stepstone.store.errors import NotFound
from stepstone.testing import wait_until

MARKER = "quokka-card-4111-marker"
"""In the exceptions' messages (and nowhere else in the clear: inputs are sealed)."""
FRAME = "wombat-frame-9d1"
"""On the lines that raise: only a traceback holds it."""
K1 = base64.b64encode(bytes(range(32))).decode()
DONE = 30.0


class Declined(Job[str]):
    """Fails on every attempt, its message naming the card it was given."""

    NAME: ClassVar[str] = "sealed.declined"
    card: str

    async def run(self, ctx: JobContext) -> str:
        raise ValueError(f"card {self.card} declined")  # wombat-frame-9d1


class Busy(Job[str]):
    """Fails its first attempt and asks to be tried again in an hour (a
    counted retry): it stays in the queue, retrying."""

    NAME: ClassVar[str] = "sealed.busy"
    card: str

    async def run(self, ctx: JobContext) -> str:
        raise RetryLater(3600, count=True, reason=f"card {self.card} busy")  # wombat-frame-9d1


def aes() -> list[Any]:
    return [AesGcmCodec([("k1", K1)])]


def runner_on(store: str, *, seal: bool, codec: Any = None) -> JobRunner:
    return JobRunner(
        store,
        jobs=[Declined, Busy],
        codec=aes() if codec is None else codec,
        seal_errors=seal,
        max_attempts=2,
        retry_backoff=0.0,
        poll_interval=0.05,
    )


class Runs:
    """The two runs' ids and what their callers were told."""

    def __init__(self, failed: str, retrying: str, raised: JobFailed) -> None:
        self.failed = failed
        self.retrying = retrying
        self.raised = raised


async def fail_and_retry(runner: JobRunner) -> Runs:
    """Run a Declined to its failure (after one retry) and a Busy to its
    wait for its retry; with the runner's codec, read back what they say."""
    declined = await runner.submit(Declined(card=MARKER))
    busy = await runner.submit(Busy(card=MARKER))
    with pytest.raises(JobFailed) as raised:
        await declined.result(timeout=DONE)

    async def retrying() -> bool:
        state = await runner.status(busy.id)
        return state is not None and state.attempts == 1 and state.last_error is not None

    await wait_until(retrying, timeout=DONE, message="the busy run waits for its retry")
    await wait_until(
        lambda: _history_of(runner, busy.id, 1), timeout=DONE, message="its attempt is recorded"
    )
    return Runs(declined.id, busy.id, raised.value)


async def _history_of(runner: JobRunner, run_id: str, claims: int) -> bool:
    return len(await runner.history(run_id)) >= claims


def files_holding(root: Path, *markers: str) -> list[str]:
    """Every file under ``root`` whose bytes hold any of ``markers``."""
    needles = [marker.encode() for marker in markers]
    files = [p for p in root.rglob("*") if p.is_file()]
    return [
        str(p.relative_to(root))
        for p in files
        if any(needle in p.read_bytes() for needle in needles)
    ]


def _cli(root: Path, *args: str, key: bool) -> subprocess.CompletedProcess[str]:
    """``stepstone ARGS --store ROOT`` as a process, given the key or not."""
    keys = {"STEPSTONE_CODEC": "aes-gcm", "STEPSTONE_KEYS": f"k1={K1}"}
    return cli_on(root, *args, env=keys if key else None)


@pytest.fixture
async def sealed_bucket(tmp_path: Path) -> AsyncIterator[tuple[Path, Runs]]:
    """A directory bucket in which a runner that seals errors failed one run
    and left another retrying."""
    root = tmp_path / "bucket"
    root.mkdir()
    async with runner_on(str(root), seal=True) as runner:
        runs = await fail_and_retry(runner)
        # With the key, the caller, the status and the history say what was raised.
        assert MARKER in runs.raised.message and runs.raised.reason == "exhausted"
        state = await runner.status(runs.failed)
        assert state is not None and state.last_error == f"ValueError: card {MARKER} declined"
        retrying = await runner.status(runs.retrying)
        assert retrying is not None and MARKER in (retrying.last_error or "")
        first, last = await runner.history(runs.failed)
        assert first.message == f"ValueError: card {MARKER} declined"
        assert first.traceback is not None and FRAME in first.traceback
        assert last.message is not None and MARKER in last.message
        (busy,) = await runner.history(runs.retrying)
        assert busy.traceback is not None and FRAME in busy.traceback
    yield root, runs


async def test_a_failed_run_leaves_no_error_text_in_the_bucket(
    sealed_bucket: tuple[Path, Runs],
) -> None:
    root, runs = sealed_bucket
    assert files_holding(root, MARKER, FRAME) == []
    # The records are there (the grep looked at them), and what the engine
    # runs by stays readable: the status, the failure's kind, the class.
    assert list((root / "attempts" / runs.failed).rglob("*"))
    assert list((root / "attempts" / runs.retrying).rglob("*"))
    assert (root / "queue" / "jobs" / runs.retrying).exists()
    assert (root / "queue" / "jobs" / runs.failed).exists()  # (dead, kept)
    outcome = (root / "outcomes" / runs.failed).read_bytes()
    assert b"exhausted" in outcome and b"ValueError" in outcome


async def test_without_seal_errors_the_same_runs_leave_their_error_text(tmp_path: Path) -> None:
    """The check above can fail: every record of an error holds its text."""
    root = tmp_path / "bucket"
    root.mkdir()
    async with runner_on(str(root), seal=False) as runner:
        await fail_and_retry(runner)
    found = files_holding(root, MARKER)
    for part in ("outcomes/", "attempts/", "queue/"):
        assert any(path.startswith(part) for path in found), (part, found)
    assert any(path.startswith("attempts/") for path in files_holding(root, FRAME))


async def test_show_opens_sealed_errors_with_the_key_and_says_encrypted_without(
    sealed_bucket: tuple[Path, Runs],
) -> None:
    root, runs = sealed_bucket
    seeing = _cli(root, "show", runs.failed, "--json", key=True)
    assert seeing.returncode == 0, seeing.stderr
    shown = json.loads(seeing.stdout)
    assert shown["outcome"]["error"]["message"] == f"ValueError: card {MARKER} declined"
    assert FRAME in shown["outcome"]["error"]["traceback"]
    assert MARKER in shown["queue"]["last_error"] and MARKER in shown["queue"]["dead_reason"]
    assert all(MARKER in (a["message"] or "") for a in shown["attempts"])

    blind = _cli(root, "show", runs.failed, "--json", key=False)
    assert blind.returncode == 0, blind.stderr
    assert MARKER not in blind.stdout and FRAME not in blind.stdout
    shown = json.loads(blind.stdout)
    error = shown["outcome"]["error"]
    assert error["message"] == "<encrypted (key k1)>" and error["reason"] == "exhausted"
    assert error["type"] == "ValueError" and error["traceback"] == "<encrypted (key k1)>"
    assert shown["queue"]["dead_reason"] == "exhausted: <encrypted (key k1)>"
    assert shown["queue"]["last_error"] == "<encrypted (key k1)>"
    for page in (
        _cli(root, "show", runs.failed, key=False),
        _cli(root, "show", runs.retrying, key=False),
        _cli(root, "history", runs.failed, key=False),
        _cli(root, "ls", key=False),
    ):
        assert page.returncode == 0, page.stderr
        assert "encrypted (key k1)" in page.stdout and MARKER not in page.stdout
        assert "Traceback" not in page.stderr
    for page in (_cli(root, "ls", key=True), _cli(root, "history", runs.failed, key=True)):
        assert page.returncode == 0 and MARKER in page.stdout, page.stderr


async def test_on_s3_a_failed_run_leaves_no_error_text_in_the_bucket(s3_url: str) -> None:
    async with runner_on(s3_url, seal=True) as runner:
        runs = await fail_and_retry(runner)
        assert MARKER in runs.raised.message
        state = await runner.status(runs.retrying)
        assert state is not None and MARKER in (state.last_error or "")
    # Read once the runner has stopped; a key listed but gone when read holds nothing.
    async with open_store(s3_url) as store:
        keys = [info.key async for info in store.scan("")]
        bodies = {}
        for key in keys:
            try:
                bodies[key] = (await store.get(key)).data
            except NotFound:
                continue
    for run_id in (runs.failed, runs.retrying):
        assert any("attempts/" in key and run_id in key for key in bodies), keys
        assert any("queue/" in key and run_id in key for key in bodies), keys
    held = [k for k, body in bodies.items() if MARKER.encode() in body or FRAME.encode() in body]
    assert held == []


async def test_errors_written_before_sealing_read_as_they_are(tmp_path: Path) -> None:
    """Records written plain (before ``seal_errors``) read the same with it on,
    beside those written sealed since."""
    root = tmp_path / "bucket"
    root.mkdir()
    async with runner_on(str(root), seal=False) as before:
        old = await fail_and_retry(before)
    async with runner_on(str(root), seal=True) as after:
        with pytest.raises(JobFailed) as raised:
            await after.handle(old.failed, Declined).result(timeout=DONE)
        assert raised.value.message == f"ValueError: card {MARKER} declined"
        state = await after.status(old.failed)
        assert state is not None and state.last_error == raised.value.message
        first, _ = await after.history(old.failed)
        assert first.traceback is not None and FRAME in first.traceback
        new = await after.submit(Declined(card="new-card"))
        with pytest.raises(JobFailed, match="new-card"):
            await new.result(timeout=DONE)
    assert files_holding(root, "new-card") == []
    shown = json.loads(_cli(root, "show", old.failed, "--json", key=False).stdout)
    assert shown["outcome"]["error"]["message"] == f"ValueError: card {MARKER} declined"


async def test_seal_errors_without_a_codec_refuses_to_start(tmp_path: Path) -> None:
    runner = runner_on(str(tmp_path), seal=True, codec=[])
    with pytest.raises(ValueError, match="seal_errors needs a payload codec"):
        await runner.start()
    await runner.close()


def test_a_sealed_text_opens_with_the_key_and_says_what_sealed_it_without() -> None:
    sealing = ErrorSealing(Payloads(aes()), on=True)
    text = f"ValueError: card {MARKER} declined\nTraceback ..."
    sealed = sealing.seal(text)
    assert MARKER not in sealed and sealed.startswith("[sealed:")
    assert open_text(Payloads(aes()), sealed) == text
    assert open_text(Payloads(aes()), f"exhausted: {sealed}") == f"exhausted: {text}"
    assert open_text(Payloads(), sealed) == "<encrypted (key k1)>"
    other = [AesGcmCodec([("k1", base64.b64encode(bytes(32)).decode())])]
    assert open_text(Payloads(other), sealed) == "<encrypted (key k1): does not open>"


def test_a_text_that_only_looks_sealed_is_shown_as_it_is() -> None:
    payloads = Payloads(aes())
    for text in ("[sealed:AAAA]", "[sealed:not base64!]", "ValueError: [sealed:]", "plain"):
        assert open_text(payloads, text) == text


def test_a_codec_that_fails_to_seal_leaves_a_note_never_the_text() -> None:
    class Broken:
        name = "broken"
        key_id = "b1"

        def encode(self, data: bytes, nonce: bytes) -> bytes:
            raise RuntimeError(f"cannot seal {data!r}")

        def decode(self, data: bytes, key_id: str) -> bytes:
            return data

    sealed = ErrorSealing(Payloads([Broken()]), on=True).seal(f"card {MARKER}")
    assert MARKER not in sealed and "RuntimeError" in sealed
