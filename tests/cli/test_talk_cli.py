"""``stepstone stream`` and ``stepstone callback complete``, and what ``show``
says of a run's streams and callbacks: through real subprocesses, on a
directory store, with a worker in the test process."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from cli_app import Chatty
from cli_support import DEADLINE, Cli, file_runner, one_line_error
from test_untrusted_text import HOSTILE, raw_controls

from stepstone import JobRunner, JobStatus
from stepstone.testing import wait_until


async def waiting(runner: JobRunner, run_id: str) -> bool:
    state = await runner.status(run_id)
    return state is not None and state.status is JobStatus.WAITING_FOR_CALLBACK


async def test_stream_prints_items_escaped_and_follows_until_the_stream_closes(
    cli: Cli, cli_dir: Path, cli_env: dict[str, str], store_dir: Path
) -> None:
    store = ["--store", str(store_dir)]
    async with file_runner(store_dir) as runner:
        handle = await runner.submit(Chatty(words=["hello", HOSTILE, "world"]))
        await wait_until(lambda: waiting(runner, handle.id), message="the run waits")
        callback_id = (cli_dir / "callback-id").read_text()

        printed = await asyncio.to_thread(cli, "stream", handle.id[:10], "words", *store)
        assert printed.status == 0, printed.err
        lines = printed.out.splitlines()
        assert lines[0] == "hello" and lines[2] == "world" and len(lines) == 3
        assert not raw_controls(printed.out), "job text reached the terminal raw"
        assert "screen cleared" in lines[1]
        assert "3 item(s) of stream 'words'" in printed.err

        as_json = await asyncio.to_thread(
            cli, "stream", handle.id, "words", "--from", "1", "--json", *store
        )
        rows = [json.loads(line) for line in as_json.out.splitlines()]
        assert rows == [{"offset": 1, "value": HOSTILE}, {"offset": 2, "value": "world"}]
        assert not raw_controls(as_json.out)

        shown = await asyncio.to_thread(cli, "show", handle.id, *store)
        assert "streams (1):" in shown.out and "words  3 write(s), open" in shown.out
        assert "callbacks (1):" in shown.out and f"id {callback_id}" in shown.out
        assert "go  waiting" in shown.out
        assert not raw_controls(shown.out)
        detail = (await asyncio.to_thread(cli, "show", handle.id, "--json", *store)).json()
        assert detail["callbacks"][0]["id"] == callback_id
        assert detail["callbacks"][0]["state"] == "waiting"
        assert [i["value"] for i in detail["streams"][0]["last"]] == ["hello", HOSTILE, "world"]

        following = await asyncio.create_subprocess_exec(
            sys.executable,
            *["-m", "stepstone", "stream", handle.id, "words", "--follow", *store],
            env=cli_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert following.stdout is not None
            first = await asyncio.wait_for(following.stdout.readline(), DEADLINE)
            assert first == b"hello\n"
            value = cli_dir / "value.json"
            value.write_text('{"ok": true, "by": "cli"}')
            done = await asyncio.to_thread(
                cli, "callback", "complete", callback_id, f"@{value}", *store
            )
            assert done.status == 0, done.err
            assert f"completed callback {callback_id}" in done.out
            rest, err = await asyncio.wait_for(following.communicate(), DEADLINE)
        finally:
            if following.returncode is None:
                following.kill()
        assert following.returncode == 0, err
        out = (first + rest).decode()
        assert out.splitlines()[-1] == '{"came": {"ok": true, "by": "cli"}}', out
        assert await handle.result(timeout=DEADLINE) == "done"

        again = await asyncio.to_thread(
            cli, "callback", "complete", callback_id, '{"ok": false}', *store
        )
        one_line_error(again, "has finished")
        audit = (await asyncio.to_thread(cli, "audit", "--json", *store)).json()
        actions = [record["action"] for record in audit["records"]]
        assert actions.count("callback") == 2, audit


async def test_callback_complete_refuses_what_it_cannot_take_in_one_line(
    cli: Cli, cli_dir: Path, store_dir: Path
) -> None:
    store = ["--store", str(store_dir)]
    async with file_runner(store_dir) as runner:
        handle = await runner.submit(Chatty(words=[]))
        await wait_until(lambda: waiting(runner, handle.id), message="the run waits")
        callback_id = (cli_dir / "callback-id").read_text()

        bad_id = await asyncio.to_thread(cli, "callback", "complete", "nonsense", "1", *store)
        one_line_error(bad_id, "not a callback id")
        assert bad_id.status == 2
        not_json = await asyncio.to_thread(
            cli, "callback", "complete", callback_id, "{oops", *store
        )
        one_line_error(not_json, "not JSON")
        missing = await asyncio.to_thread(
            cli, "callback", "complete", callback_id, "@/nonexistent/value.json", *store
        )
        one_line_error(missing, "cannot read")
        assert await waiting(runner, handle.id), "a refused completion changed the run"
    # No worker runs now: the run cannot take the first completion before the second comes.
    first = await asyncio.to_thread(cli, "callback", "complete", callback_id, "1", *store)
    second = await asyncio.to_thread(cli, "callback", "complete", callback_id, "2", *store)
    assert first.status == 0, first.err
    assert second.status == 1 and "the first completion stands" in second.out, second
    async with file_runner(store_dir) as runner:
        await runner.handle(handle.id, Chatty).result(timeout=DEADLINE)
        came = [value async for value in runner.stream(handle.id, "words")]
    assert came == [{"came": 1}]
    no_stream = await asyncio.to_thread(cli, "stream", "0" * 32, "words", *store)
    one_line_error(no_stream)
