"""Fixtures for driving ``stepstone`` through real subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # cli_app and cli_support, for the test process too

from cli_support import Cli, Result  # noqa: E402


@pytest.fixture
def cli_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The directory the test and cli_app's jobs coordinate through."""
    path = tmp_path / "coord"
    path.mkdir()
    monkeypatch.setenv("CLI_TEST_DIR", str(path))
    yield path


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    path.mkdir()
    return path


@pytest.fixture
def cli_env(cli_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["CLI_TEST_DIR"] = str(cli_dir)
    env.pop("STEPSTONE_STORE", None)
    env.pop("STEPSTONE_PREFIX", None)
    return env


@pytest.fixture
def cli(cli_env: dict[str, str]) -> Cli:
    """Run ``python -m workflow ARGS`` to completion; returns status, stdout, stderr."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Result:
        done = subprocess.run(
            [sys.executable, "-m", "stepstone", *args],
            env={**cli_env, **(env or {})},
            stdin=subprocess.DEVNULL,  # no terminal, as under cron or CI
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    return run
