"""``stepstone ls`` and ``show`` of a debounced run: listed as debounced
(and by ``--status debounced``), shown with its key's window as it stands
(until when, after how many submits, the last submit's input), its key's
text escaped."""

from __future__ import annotations

from pathlib import Path

from cli_app import Greet
from cli_support import DEADLINE, Cli, file_runner

from stepstone import Debounce, JobStatus, SubmitOptions
from stepstone.testing import wait_until

HOSTILE_KEY = "doc-\x1b[31m7"


async def test_ls_and_show_say_a_run_is_debounced_until_when(
    cli: Cli, store_dir: Path, cli_dir: Path
) -> None:
    runner = file_runner(store_dir)
    options = SubmitOptions(debounce=Debounce(HOSTILE_KEY, wait=600))
    async with runner:
        handles = [await runner.submit(Greet(name=n), options) for n in ("a", "b", "c")]
        run = handles[0].id
        assert {h.id for h in handles} == {run}

        async def debounced() -> bool:
            state = await runner.status(run)
            return state is not None and state.status is JobStatus.DEBOUNCED

        await wait_until(debounced, timeout=DEADLINE)
    store = ["--store", str(store_dir)]

    listed = cli("ls", "--json", *store)
    assert listed.status == 0, listed.err
    assert [(r["id"], r["status"]) for r in listed.json()["runs"]] == [(run, "debounced")]
    only = cli("ls", "--status", "debounced", *store)
    assert only.status == 0 and run[:12] in only.out and "debounced" in only.out

    shown = cli("show", run, *store)
    assert shown.status == 0, shown.err
    assert "\x1b" not in shown.out, "the key's text drove the terminal"
    debounced_line = next(
        line for line in shown.out.splitlines() if line.split()[:1] == ["debounced"]
    )
    assert "until" in debounced_line and "3 submits" in debounced_line
    assert "doc-\\x1b[31m7" in shown.out  # the key, escaped
    assert '{"name": "c"}' in shown.out  # the input it will run: the last submit's
    as_json = cli("show", run, "--json", *store).json()
    window = as_json["queue"]["debounce"]["window"]
    assert window["submits"] == 3 and not window["closed"]
    assert as_json["queue"]["debounce"]["key"] == HOSTILE_KEY
    assert as_json["input"] == {"name": "c"}
