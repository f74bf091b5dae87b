"""``stepstone worker`` takes its payload codecs from the environment: a
worker whose application's runner has no codec, started with
``STEPSTONE_CODEC`` and ``STEPSTONE_KEYS``, opens a job submitted sealed and
seals what it writes; the bucket holds no plain text of the run."""

from __future__ import annotations

import base64
import signal
import subprocess
import sys
from pathlib import Path

from cli_app import Greet
from cli_support import DEADLINE, file_runner

from stepstone import AesGcmCodec, ZstdCodec

WORKER = [sys.executable, "-m", "stepstone", "worker", "cli_app:make_runner"]
MARKER = "numbat-30c2-marker"
KEY = base64.b64encode(bytes(range(50, 82))).decode()


async def test_a_worker_takes_its_codecs_and_keys_from_the_environment(
    store_dir: Path, cli_env: dict[str, str]
) -> None:
    env = {
        **cli_env,
        "STEPSTONE_STORE": str(store_dir),
        "STEPSTONE_CODEC": "zstd,aes-gcm",
        "STEPSTONE_KEYS": f"w1={KEY}",
    }
    proc = subprocess.Popen(  # noqa: ASYNC220 - returns at once
        WORKER, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        runner = file_runner(store_dir)  # submits only: the worker process runs the job
        runner.codec = [ZstdCodec(), AesGcmCodec({"w1": KEY})]
        handle = await runner.submit(Greet(name=MARKER))
        result = await handle.result(timeout=DEADLINE)
        await runner.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert MARKER in result  # (a worker without the codec could not have read the input)
    assert files_holding(store_dir, MARKER) == []


def files_holding(root: Path, marker: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and marker.encode() in p.read_bytes()]
