"""``stepstone ls --attr NAME=VALUE``: the runs with every attribute given,
found through the index, as JSON and as a table; a bad one is a one-line
error naming it (exit 2), never a traceback."""

from __future__ import annotations

from pathlib import Path

from cli_app import Greet
from cli_support import DEADLINE, Cli, file_runner, one_line_error

from stepstone import SubmitOptions


async def test_ls_lists_the_runs_with_the_attributes_given(cli: Cli, store_dir: Path) -> None:
    runner = file_runner(store_dir)
    async with runner:
        pro = await runner.submit(
            Greet(name="a"), SubmitOptions(attributes={"tenant": "acme", "plan": "pro"})
        )
        free = await runner.submit(
            Greet(name="b"), SubmitOptions(attributes={"tenant": "acme", "plan": "free"})
        )
        other = await runner.submit(Greet(name="c"), SubmitOptions(attributes={"tenant": "beta"}))
        for handle in (pro, free, other):
            await handle.result(timeout=DEADLINE)
    store = ["--store", str(store_dir)]

    listed = cli("ls", "--json", "--attr", "tenant=acme", *store)
    assert listed.status == 0, listed.err
    rows = {row["id"]: row for row in listed.json()["runs"]}
    assert set(rows) == {pro.id, free.id}
    assert rows[pro.id]["attributes"] == {"tenant": "acme", "plan": "pro"}
    both = cli("ls", "--json", "--attr", "tenant=acme", "--attr", "plan=pro", *store)
    assert [row["id"] for row in both.json()["runs"]] == [pro.id]
    table = cli("ls", "--attr", "tenant=beta", "--status", "succeeded", *store)
    assert table.status == 0, table.err
    assert other.id[:12] in table.out and pro.id[:12] not in table.out
    assert "1 run(s) from the index of attributes" in table.out

    for bad, said in (
        ("tenant", "--attr 'tenant': expected NAME=VALUE"),
        ("ten ant=x", "attribute name 'ten ant' is not allowed"),
        ("tenant=", "attribute 'tenant' has an empty value"),
        ("tenant=a\x1bb", "control or format character U+001B"),
    ):
        result = cli("ls", "--attr", bad, *store)
        assert result.status == 2, result.err
        one_line_error(result, said)
