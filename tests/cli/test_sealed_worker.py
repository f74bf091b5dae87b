"""``stepstone worker`` takes its payload codecs from the environment: a
worker whose application's runner has no codec, started with
``STEPSTONE_CODEC`` and ``STEPSTONE_KEYS``, opens a job submitted sealed and
seals what it writes; the bucket holds no plain text of the run. Given
``--seal-errors`` (or ``STEPSTONE_SEAL_ERRORS=1``) it seals the text of the
errors it writes too; without a codec to seal them with, it does not start."""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import pytest
from cli_app import Greet, Refuse
from cli_support import DEADLINE, Cli, file_runner, one_line_error, worker_process

from stepstone import AesGcmCodec, JobFailed, ZstdCodec

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
    with worker_process(WORKER, env):
        runner = file_runner(store_dir)  # submits only: the worker process runs the job
        runner.codec = [ZstdCodec(), AesGcmCodec({"w1": KEY})]
        handle = await runner.submit(Greet(name=MARKER))
        result = await handle.result(timeout=DEADLINE)
        await runner.close()
    assert MARKER in result  # (a worker without the codec could not have read the input)
    assert files_holding(store_dir, MARKER) == []


@pytest.mark.parametrize("asked", ["option", "environment"])
async def test_a_worker_told_to_seals_the_errors_it_writes(
    store_dir: Path, cli_env: dict[str, str], asked: str
) -> None:
    env = {
        **cli_env,
        "STEPSTONE_STORE": str(store_dir),
        "STEPSTONE_CODEC": "aes-gcm",
        "STEPSTONE_KEYS": f"w1={KEY}",
    }
    command = WORKER
    if asked == "option":
        command = [*WORKER, "--seal-errors"]
    else:
        env["STEPSTONE_SEAL_ERRORS"] = "1"
    with worker_process(command, env):
        runner = file_runner(store_dir)  # submits only: the worker process runs the job
        runner.codec = [AesGcmCodec({"w1": KEY})]
        handle = await runner.submit(Refuse(message=f"refused {MARKER}"))
        with pytest.raises(JobFailed, match=MARKER):
            await handle.result(timeout=DEADLINE)
        await runner.close()
    assert files_holding(store_dir, MARKER) == []


def test_a_worker_told_to_seal_errors_without_a_codec_does_not_start(
    store_dir: Path, cli: Cli
) -> None:
    env = {"STEPSTONE_STORE": str(store_dir)}
    one_line_error(cli("worker", "cli_app:make_runner", "--seal-errors", env=env), "codec")
    bad = cli("worker", "cli_app:make_runner", env={**env, "STEPSTONE_SEAL_ERRORS": "maybe"})
    one_line_error(bad, "STEPSTONE_SEAL_ERRORS")


def files_holding(root: Path, marker: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and marker.encode() in p.read_bytes()]
