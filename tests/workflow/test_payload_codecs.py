"""Payload codecs: a run's payloads sealed in the bucket, opened by whoever
holds the key, and a clear failure for whoever does not.

On a real directory store: a run whose input, step results (one over the
1 MiB a large value is streamed from), progress, event, stream item,
callback value and result carry a marker leaves no file holding it
(and, without a codec, the same run does: the grep can fail); keys rotate
from k1 to k2 under runs waiting across the change; a run whose records
were sealed under a key nobody holds, or whose ciphertext was altered,
fails for good naming the key, in bounded time; ``stepstone show`` says
``encrypted (key k1)`` without the key and shows the values with it.
"""

from __future__ import annotations

import base64
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from stepstone import (
    AesGcmCodec,
    Debounce,
    FailureKind,
    Job,
    JobContext,
    JobRunner,
    JobStatus,
    PayloadUnreadable,
    SubmitOptions,
    ZlibCodec,
    ZstdCodec,
)
from stepstone.records.payloads import CHUNK
from stepstone.store import ObjectStore, open_store
from stepstone.store.errors import NotFound
from stepstone.testing import wait_until

MARKER = "quokka-7c1e-marker"
K1 = base64.b64encode(bytes(range(32))).decode()
K2 = base64.b64encode(bytes(range(100, 132))).decode()
DONE = 30.0
Completed = subprocess.CompletedProcess[str]


class Seen:
    """What the runs hand out of themselves: their callbacks' ids."""

    def __init__(self) -> None:
        self.callbacks: list[str] = []


class Everything(Job[str]):
    """Every kind of payload, each holding ``text``: a step's result, a large
    step's, its progress, a stream item, an event, a callback's value."""

    NAME: ClassVar[str] = "codec.everything"
    text: str

    async def run(self, ctx: JobContext) -> str:
        small = await ctx.step("small", _echo, f"step {self.text}")
        large = await ctx.step("large", _large, self.text)
        ctx.progress({"at": f"progress {self.text}"})
        await ctx.stream("out").write(f"item {self.text}")
        event = await ctx.wait_for_event("go")
        cb = await ctx.callback("answer")
        ctx.state(Seen).callbacks.append(cb.id)
        answer = await cb
        return f"{small} | {len(large)} | {event} | {answer} | result {self.text}"


class Waits(Job[str]):
    """A step, then a wait for event ``go``, then another step."""

    NAME: ClassVar[str] = "codec.waits"
    text: str
    fail_first: bool = False

    async def run(self, ctx: JobContext) -> str:
        before = await ctx.step("before", _echo, f"before {self.text}")
        if self.fail_first and ctx.attempt == 1:
            raise RuntimeError("the first attempt fails after its step")
        event = await ctx.wait_for_event("go")
        after = await ctx.step("after", _echo, f"after {event}")
        return f"{before} / {after}"


async def _echo(text: str) -> str:
    return text


def _large(text: str) -> str:
    """About 3 MiB that compress to over 2: written and read in chunks, as
    a large value, whichever the codecs."""
    noise = base64.b64encode(random.Random(5).randbytes(9 * CHUNK // 4)).decode()
    return text + noise + text


def aes(*pairs: tuple[str, str]) -> AesGcmCodec:
    return AesGcmCodec(list(pairs))


def files_holding(root: Path, marker: str) -> list[str]:
    """Every file under ``root`` whose bytes hold ``marker``."""
    needle = marker.encode()
    files = [p for p in root.rglob("*") if p.is_file()]
    return [str(p.relative_to(root)) for p in files if needle in p.read_bytes()]


SEEN = Seen()
"""Every runner's (the tests of one process run one after another)."""


def runner_on(root: Path, codec: Any, **kwargs: Any) -> JobRunner:
    kwargs.setdefault("jobs", [Everything, Waits])
    kwargs.setdefault("state", [SEEN])
    root.mkdir(exist_ok=True)
    return JobRunner(str(root), codec=codec, poll_interval=0.05, **kwargs)


async def status_is(runner: JobRunner, run_id: str, status: JobStatus) -> bool:
    state = await runner.status(run_id)
    return state is not None and state.status is status


async def waiting(runner: JobRunner, run_id: str) -> None:
    """Wait until the run waits for its event."""
    await wait_until(
        lambda: status_is(runner, run_id, JobStatus.WAITING_FOR_EVENT),
        timeout=DONE,
        message=f"run {run_id} waits for its event",
    )


async def everything(runner: JobRunner, text: str) -> tuple[str, str]:
    """Run an Everything job to its end: its run id and its result."""
    handle = await runner.submit(Everything(text=text))
    await waiting(runner, handle.id)
    SEEN.callbacks.clear()
    await runner.send_event(handle.id, "go", f"event {text}")
    await wait_until(lambda: bool(SEEN.callbacks), timeout=DONE, message="the callback is made")
    await runner.complete_callback(SEEN.callbacks[-1], f"callback {text}")
    return handle.id, await handle.result(timeout=DONE)


@pytest.mark.parametrize(
    "codecs",
    [
        pytest.param(lambda: [aes(("k1", K1))], id="aes-gcm"),
        pytest.param(lambda: [ZstdCodec(), aes(("k1", K1))], id="zstd+aes-gcm"),
        pytest.param(lambda: [ZlibCodec(), aes(("k1", K1))], id="zlib+aes-gcm"),
    ],
)
async def test_an_encrypted_run_leaves_no_plaintext_in_the_bucket(
    tmp_path: Path, codecs: Any
) -> None:
    root = tmp_path / "bucket"
    async with runner_on(root, codecs()) as runner:
        run_id, result = await everything(runner, MARKER)
        items = [item async for item in runner.stream(run_id, "out", follow=False)]
        state = await runner.status(run_id)
    assert result == (
        f"step {MARKER} | {len(_large(MARKER))} | event {MARKER} | callback {MARKER} "
        f"| result {MARKER}"
    )
    assert items == [f"item {MARKER}"]
    assert state is not None and state.progress == {"at": f"progress {MARKER}"}
    assert files_holding(root, MARKER) == []
    # What the engine runs by stays readable: the outcome's status, the queue's keys.
    assert any(p.name == run_id for p in (root / "outcomes").iterdir())


async def test_an_encrypted_run_on_s3_leaves_no_plaintext_in_the_bucket(s3_url: str) -> None:
    """On moto's S3: the large step is written and read through S3's own
    large-value paths (a streamed PUT, a ranged read into the decoder)."""
    codec = [ZstdCodec(), aes(("k1", K1))]
    async with JobRunner(s3_url, jobs=[Everything], state=[SEEN], codec=codec) as runner:
        run_id, result = await everything(runner, MARKER)
        assert result.endswith(f"| result {MARKER}")
    # Read once the runner has stopped (its queue's last deletes done). A key
    # listed but gone when read holds nothing: on RGW, a delete's husk.
    async with open_store(s3_url) as store:
        keys = [info.key async for info in store.scan("")]
        bodies = {key: await _body_or_none(store, key) for key in keys}
    assert any(run_id in key for key in keys)
    assert [key for key, body in bodies.items() if body and MARKER.encode() in body] == []


async def _body_or_none(store: ObjectStore, key: str) -> bytes | None:
    try:
        return (await store.get(key)).data
    except NotFound:
        return None


async def test_without_a_codec_the_same_run_leaves_its_payloads_readable(tmp_path: Path) -> None:
    """The check above can fail: every payload the run writes holds the marker."""
    root = tmp_path / "bucket"
    async with runner_on(root, None) as runner:
        await everything(runner, MARKER)
    found = files_holding(root, MARKER)
    for part in ("memos/", "streams/", "outcomes/", "progress/"):
        assert any(path.startswith(part) for path in found), (part, found)


async def test_compression_alone_leaves_no_marker_and_reads_back(tmp_path: Path) -> None:
    root = tmp_path / "bucket"
    async with runner_on(root, [ZstdCodec()]) as runner:
        _, result = await everything(runner, MARKER * 50)
    assert result.endswith(f"result {MARKER * 50}")
    assert files_holding(root, MARKER * 50) == []


async def test_keys_rotate_under_runs_waiting_across_the_change(tmp_path: Path) -> None:
    root = tmp_path / "bucket"
    async with runner_on(root, [ZstdCodec(), aes(("k1", K1))]) as old:
        handles = [await old.submit(Waits(text=f"{MARKER}-{n}")) for n in range(3)]
        for handle in handles:
            await waiting(old, handle.id)
    # The fleet now encrypts under k2 and keeps k1 to read what was sealed under it.
    async with runner_on(root, [ZstdCodec(), aes(("k2", K2), ("k1", K1))]) as new:
        for handle in handles:
            await new.send_event(handle.id, "go", f"go {handle.id}")
        results = [await new.handle(h.id, Waits).result(timeout=DONE) for h in handles]
        # A run submitted after the change is sealed under k2 only.
        fresh = await new.submit(Waits(text=f"{MARKER}-fresh"))
        await waiting(new, fresh.id)
    for n, (handle, result) in enumerate(zip(handles, results, strict=True)):
        assert result == f"before {MARKER}-{n} / after go {handle.id}"
    assert files_holding(root, MARKER) == []
    # What each wrote before the change stays under k1 (the bucket was not
    # rewritten); what came after is under k2.
    shown = json.loads(_cli(root, "show", handles[0].id, "--json").stdout)
    steps = {memo["step"]: memo["value"] for memo in shown["memos"]}
    assert "encrypted (key k1)" in steps["before"] and "encrypted (key k2)" in steps["after"]
    assert "encrypted (key k2)" in shown["outcome"]["result"]
    # Once the runs sealed under k1 are gone, k1 can go: k2 alone reads the new run.
    async with runner_on(root, [ZstdCodec(), aes(("k2", K2))]) as newest:
        await newest.send_event(fresh.id, "go", "now")
        assert await newest.handle(fresh.id, Waits).result(timeout=DONE) == (
            f"before {MARKER}-fresh / after now"
        )


async def test_a_run_sealed_under_a_key_nobody_holds_fails_naming_the_key(tmp_path: Path) -> None:
    root = tmp_path / "bucket"
    async with runner_on(root, [aes(("k1", K1))]) as old:
        handle = await old.submit(Waits(text=MARKER))
        await waiting(old, handle.id)
    async with runner_on(root, [aes(("k2", K2))], max_attempts=5) as lost:
        await lost.send_event(handle.id, "go", "now")
        outcome = await lost.handle(handle.id, Waits).join(timeout=DONE)
    assert outcome.status is JobStatus.FAILED
    assert outcome.error is not None
    # For good, at once: no retry would find the key (its input is the first
    # payload the worker opens: a payload it cannot read is a malformed one).
    assert outcome.error.reason in (FailureKind.MALFORMED, FailureKind.PERMANENT)
    assert "key 'k1'" in outcome.error.message, outcome.error.message
    assert outcome.attempts == 1


async def test_an_input_sealed_under_a_key_nobody_holds_fails_the_run(tmp_path: Path) -> None:
    root = tmp_path / "bucket"
    submitter = runner_on(root, [aes(("k1", K1))])
    handle = await submitter.submit(Waits(text=MARKER))  # (no worker runs here)
    async with runner_on(root, [aes(("k2", K2))]) as lost:
        outcome = await lost.handle(handle.id, Waits).join(timeout=DONE)
    await submitter.close()
    assert outcome.status is JobStatus.FAILED
    assert outcome.error is not None and "key 'k1'" in outcome.error.message


async def test_an_altered_ciphertext_fails_the_run_and_never_decodes(tmp_path: Path) -> None:
    root = tmp_path / "bucket"
    async with runner_on(root, [aes(("k1", K1))]) as runner:
        handle = await runner.submit(Waits(text=MARKER, fail_first=True))
        await waiting(runner, handle.id)
        (memo,) = [p for p in (root / "memos").rglob("*") if p.is_file() and "#" in p.name]
        data = bytearray(memo.read_bytes())
        data[-5] ^= 0x01  # one bit of the step's ciphertext (or its tag)
        memo.write_bytes(bytes(data))
        await runner.send_event(handle.id, "go", "now")
        outcome = await runner.handle(handle.id, Waits).join(timeout=DONE)
    assert outcome.status is JobStatus.FAILED
    assert outcome.error is not None
    message = outcome.error.message
    assert "does not open" in message and "key k1" in message, message


async def test_an_awaiting_caller_without_the_key_is_told_which_key(tmp_path: Path) -> None:
    root = tmp_path / "bucket"
    async with runner_on(root, [aes(("k1", K1))]) as runner:
        handle = await runner.submit(Waits(text=MARKER))
        await waiting(runner, handle.id)
        await runner.send_event(handle.id, "go", "now")
        await handle.result(timeout=DONE)
    reader = runner_on(root, None)
    with pytest.raises(PayloadUnreadable, match="key 'k1'") as raised:
        await reader.handle(handle.id, Waits).result(timeout=DONE)
    assert raised.value.key_id == "k1" and raised.value.missing
    await reader.close()


def _cli(root: Path, *args: str, env: dict[str, str] | None = None) -> Completed:
    full = {k: v for k, v in os.environ.items() if not k.startswith("STEPSTONE_")}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "stepstone", *args, "--store", str(root)],
        capture_output=True,
        text=True,
        env=full,
        timeout=60,
    )


async def test_show_says_what_sealed_each_value_without_the_key_and_shows_it_with(
    tmp_path: Path,
) -> None:
    root = tmp_path / "bucket"
    async with runner_on(root, [ZstdCodec(), aes(("k2", K2))]) as runner:
        run_id, _ = await everything(runner, MARKER)
    blind = _cli(root, "show", run_id, "--json")
    assert blind.returncode == 0, blind.stderr
    shown = json.loads(blind.stdout)
    assert MARKER not in blind.stdout
    assert "encrypted (key k2)" in shown["input"]
    assert "encrypted (key k2)" in shown["outcome"]["result"]
    listing = _cli(root, "ls")
    assert listing.returncode == 0 and run_id[:12] in listing.stdout
    stream = _cli(root, "stream", run_id, "out")
    assert stream.returncode == 1
    assert "key 'k2'" in stream.stderr and "Traceback" not in stream.stderr
    keys = {"STEPSTONE_CODEC": "zstd,aes-gcm", "STEPSTONE_KEYS": f"k2={K2}"}
    seeing = _cli(root, "show", run_id, "--json", env=keys)
    assert seeing.returncode == 0, seeing.stderr
    shown = json.loads(seeing.stdout)
    assert shown["input"] == {"text": MARKER}
    assert shown["outcome"]["result"].endswith(f"result {MARKER}")
    assert _cli(root, "stream", run_id, "out", env=keys).stdout.strip().endswith(f"item {MARKER}")
    # A key is never taken from the command line, and a bad configuration is one line.
    bad = _cli(root, "show", run_id, env={"STEPSTONE_CODEC": "aes-gcm"})
    assert bad.returncode == 2 and "STEPSTONE_KEYS" in bad.stderr and "Traceback" not in bad.stderr


async def test_a_debounced_submit_keeps_its_input_sealed_while_it_waits(tmp_path: Path) -> None:
    """A debounce window holds its last input until the run takes it: a payload
    like any other, so sealed too (no worker runs: the window stays open)."""
    root = tmp_path / "store"
    api = runner_on(root, aes(("k1", K1)))
    try:
        options = SubmitOptions(debounce=Debounce("doc-7", wait=60))
        handle = await api.submit(Waits(text=f"{MARKER}-debounced"), options)
        assert handle.debounced is not None
        assert list((root / "debounce").rglob("*")), "the window is kept in the store"
        assert files_holding(root, MARKER) == []
    finally:
        await api.close()
