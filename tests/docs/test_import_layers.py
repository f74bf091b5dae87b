"""tools/import_cycles.py, which CI runs: the package as it is passes, and
the check fails on what it is there to catch (a circle, an import up a
layer or up the workflow layer's tiers, a part placed on no tier)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

TOOL = Path(__file__).resolve().parents[2] / "tools" / "import_cycles.py"


def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_cycles", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_package_has_no_circle_and_no_upward_import() -> None:
    done = subprocess.run(
        [sys.executable, str(TOOL)], capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stdout) == (0, "")


def test_an_upward_import_inside_the_workflow_layer_fails() -> None:
    check = tool()
    graph = {
        "stepstone.ui.present": {"stepstone.cli.durations", "stepstone.ops.reads"},
        "stepstone.cli.durations": {"stepstone.cli.errors"},
        "stepstone.cli.errors": set(),
        "stepstone.ops.reads": {"stepstone.records.layout"},
        "stepstone.records.layout": {"stepstone.errors"},
        "stepstone.errors": set(),
        "stepstone.job": {"stepstone.execute.scope"},
        "stepstone.execute.scope": {"stepstone.records.layout"},
    }
    assert check.upward(graph) == [
        "upward import: stepstone.job imports stepstone.execute.scope (execute is above job)",
        "upward import: stepstone.ui.present imports stepstone.cli.durations (cli is above ui)",
    ]


def test_an_import_up_a_layer_a_sideways_one_and_an_unplaced_part_fail() -> None:
    check = tool()
    graph = {
        "stepstone.store.base": {"stepstone.runtime.queue"},
        "stepstone.runtime.queue": {"stepstone.store.base"},
        "stepstone.records.codec": {"stepstone.telemetry.logs"},
        "stepstone.telemetry.logs": set(),
        "stepstone.newpart": set(),
    }
    assert check.upward(graph) == [
        "stepstone.newpart has no tier: place it in TIERS (tools/import_cycles.py)",
        "sideways import: stepstone.records.codec imports stepstone.telemetry.logs "
        "(records and telemetry stand side by side)",
        "upward import: stepstone.store.base imports stepstone.runtime.queue (a higher layer)",
    ]
    assert check.cycles(graph) == [["stepstone.runtime.queue", "stepstone.store.base"]]
