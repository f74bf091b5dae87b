"""An application's own ``store``, ``runtime`` and ``workflow`` modules are its own.

stepstone installs one namespace, ``stepstone`` (``stepstone.store``,
``stepstone.runtime``), so an application with a ``store.py`` (a very common
name) at its root, run by ``stepstone worker app:runner`` (which puts the
application's directory first on ``sys.path``), imports stepstone and its
own modules side by side.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stepstone import JobRunner

APP = """
    from typing import ClassVar

    import runtime
    import store
    import workflow
    from stepstone import Job, JobContext, JobRunner


    def owners() -> str:
        return f"{store.OWNER}/{runtime.OWNER}/{workflow.OWNER}"


    class Greet(Job[str]):
        NAME: ClassVar[str] = "shadow.greet"
        who: str

        async def run(self, ctx: JobContext) -> str:
            hello = await ctx.step("hello", lambda: f"hello {self.who}")
            return f"{hello} from {owners()}"


    runner = JobRunner(STORE_DIR, jobs=[Greet])
"""

STEPSTONE = Path(sys.executable).parent / "stepstone"


def write_app(app: Path, store_dir: Path, layout: str) -> None:
    app.mkdir()
    (app / "app.py").write_text(textwrap.dedent(APP).replace("STORE_DIR", repr(str(store_dir))))
    (app / "runtime.py").write_text("OWNER = 'app-runtime'\n")
    (app / "workflow.py").write_text("OWNER = 'app-workflow'\n")
    if layout == "module":
        (app / "store.py").write_text("OWNER = 'app-store'\n")
    else:
        # A package named store with an errors module: the collision users met
        # ("No module named 'store.errors'; 'store' is not a package").
        (app / "store").mkdir()
        (app / "store" / "__init__.py").write_text("from .errors import OWNER\n")
        (app / "store" / "errors.py").write_text("OWNER = 'app-store'\n")


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["module", "package"])
async def test_an_app_with_its_own_store_runtime_workflow_runs_under_stepstone_worker(
    tmp_path: Path, layout: str
) -> None:
    store_dir, app = tmp_path / "jobs", tmp_path / "app"
    store_dir.mkdir()
    write_app(app, store_dir, layout)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    worker = subprocess.Popen(  # noqa: ASYNC220 - returns at once
        [str(STEPSTONE), "worker", "app:runner"],
        cwd=app,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        sys.path.insert(0, str(app))
        try:
            import app as app_module  # the application's module, as a user's API would
        finally:
            sys.path.remove(str(app))
        submitter = JobRunner(str(store_dir), jobs=[app_module.Greet])
        handle = await submitter.submit(app_module.Greet(who="ada"))
        result = await handle.result(timeout=60)
        assert result == "hello ada from app-store/app-runtime/app-workflow"
        await submitter.close()
    finally:
        for name in ("app", "store", "store.errors", "runtime", "workflow"):
            sys.modules.pop(name, None)
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0, output


def test_stepstone_installs_no_top_level_workflow_store_or_runtime(tmp_path: Path) -> None:
    probe = (
        "import importlib.util, stepstone, stepstone.store, stepstone.runtime\n"
        "print([m for m in ('workflow', 'store', 'runtime') if importlib.util.find_spec(m)])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
