"""A run's fairness key in ``stepstone ls`` (a FAIRNESS column when some run
has one) and ``stepstone show`` (a line, with its weight; JSON fields)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from cli_app import Greet
from cli_support import Result

from stepstone import JobRunner, SubmitOptions
from stepstone.cli import main


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> Result:
    status = main(list(argv))
    captured = capsys.readouterr()
    return Result(status, captured.out, captured.err)


def test_ls_and_show_say_a_runs_fairness_key(
    store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def submit() -> list[str]:
        runner = JobRunner(str(store_dir), jobs=[Greet])  # no worker: they stay queued
        try:
            return [
                (await runner.submit(Greet(name="a"), SubmitOptions(fairness_key="tenant-a"))).id,
                (
                    await runner.submit(
                        Greet(name="b"), SubmitOptions(fairness_key="tenant-b", fairness_weight=3)
                    )
                ).id,
                (await runner.submit(Greet(name="c"))).id,
            ]
        finally:
            await runner.close()

    a, b, plain = asyncio.run(submit())
    table = cli(capsys, "ls", "--store", str(store_dir)).out.splitlines()
    assert table[0].split()[:4] == ["ID", "STATUS", "KIND", "FAIRNESS"]
    column = {line.split()[0]: line.split()[3] for line in table[1:4]}
    assert column == {a[:12]: "tenant-a", b[:12]: "tenant-b", plain[:12]: "-"}
    listed = cli(capsys, "ls", "--store", str(store_dir), "--json").json()["runs"]
    assert {row["id"]: row["fairness_key"] for row in listed} == {
        a: "tenant-a",
        b: "tenant-b",
        plain: None,
    }
    shown = cli(capsys, "show", b, "--store", str(store_dir)).out
    assert "fairness key tenant-b (weight 3)" in " ".join(shown.split())
    assert "fairness key" not in cli(capsys, "show", plain, "--store", str(store_dir)).out
    detail = cli(capsys, "show", a, "--store", str(store_dir), "--json").json()["queue"]
    assert (detail["fairness_key"], detail["fairness_weight"]) == ("tenant-a", 1)


def test_ls_has_no_fairness_column_when_no_run_has_a_key(
    store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def submit() -> None:
        runner = JobRunner(str(store_dir), jobs=[Greet])
        try:
            await runner.submit(Greet(name="c"))
        finally:
            await runner.close()

    asyncio.run(submit())
    header = cli(capsys, "ls", "--store", str(store_dir)).out.splitlines()[0]
    assert "FAIRNESS" not in header
