"""The kit as a user's project sees it: loaded by pytest through the
``pytest11`` entry point, in a project of its own, in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

CONFTEST = """
import pytest
from jobs import Double, Tally

TALLY = Tally()

@pytest.fixture
def stepstone_jobs():
    return [Double]

@pytest.fixture
def stepstone_state():
    return [TALLY]
"""

JOBS = """
from typing import ClassVar
from stepstone import Job, JobContext

class Tally:
    def __init__(self):
        self.runs = 0

class Double(Job[int]):
    NAME: ClassVar[str] = "user.double"
    n: int

    async def run(self, ctx: JobContext) -> int:
        ctx.state(Tally).runs += 1
        return 2 * self.n
"""

TESTS = """
import pytest
from jobs import Double, Tally
from stepstone.testing import run_job

async def test_conftest_registers_jobs_and_state(stepstone_memory_runner):
    assert await run_job(stepstone_memory_runner, Double(n=21)) == 42
    assert stepstone_memory_runner.state_of(Tally).runs >= 1

@pytest.mark.stepstone(max_attempts=2)
async def test_marker_options_apply_over_conftest_jobs(stepstone_memory_runner):
    assert stepstone_memory_runner.max_attempts == 2
    assert await run_job(stepstone_memory_runner, Double(n=1)) == 2
"""

NO_JOBS = """
async def test_forgot_the_jobs(stepstone_memory_runner):
    pass
"""


def run_pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        # strict mode: the fixtures must not rely on the project choosing auto mode
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "asyncio_mode=strict",
            *args,
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_user_project_gets_the_fixtures_and_configures_them(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "jobs.py").write_text(textwrap.dedent(JOBS))
    (project / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    (project / "tests" / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (project / "tests" / "test_user.py").write_text(
        "import pytest\npytestmark = pytest.mark.asyncio\n" + textwrap.dedent(TESTS)
    )
    (project / "other").mkdir()
    (project / "other" / "test_no_jobs.py").write_text(
        "import pytest\npytestmark = pytest.mark.asyncio\n" + textwrap.dedent(NO_JOBS)
    )

    done = run_pytest(project, "tests")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout

    forgot = run_pytest(project, "other")
    assert forgot.returncode != 0
    assert "mark the test @pytest.mark.stepstone(jobs=[MyJob])" in forgot.stdout + forgot.stderr


def test_importing_the_plugin_does_not_import_moto_or_boto() -> None:
    heavy = {"moto", "boto3", "botocore", "aiobotocore", "s3fs", "werkzeug"}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, stepstone.testing; "
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {heavy!r}))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"imported at plugin load: {done.stdout}"
