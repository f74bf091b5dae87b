"""A run's streams and callbacks in the web view, in a real headless browser:
the run's page shows each stream's last items and each callback (its id,
its state, never its URL), a stream's page lists its items, job text shows
as text and never runs; an operator completes a callback from the page,
confirmed, recorded in the audit, and the run takes it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_actions import confirm, fill
from test_browser import click, never_ran_injected_script, text, texts
from ui_jobs import HOSTILE, Narrate
from ui_kit import DEADLINE, serve, wait_for

from stepstone import JobRunner
from stepstone.records.callbacks import CallbackId
from stepstone.records.calls import PositionedMemo
from stepstone.records.codec import unpack_stored
from stepstone.testing import wait_until

LINES = [f"line {n}" for n in range(8)]


@dataclass
class Narrating:
    store: str
    run_id: str
    callback_id: str
    url: str | None

    def runner(self) -> JobRunner:
        return JobRunner(self.store, jobs=[Narrate], retry_backoff=0.0, poll_interval=0.05)


@pytest.fixture
async def narrating(store_url: str) -> AsyncIterator[Narrating]:
    """A run that wrote its story and waits for its callback; nothing runs it then."""
    runner = JobRunner(store_url, jobs=[Narrate], retry_backoff=0.0, poll_interval=0.05)
    async with runner:
        handle = await runner.submit(Narrate(lines=[*LINES[:3], HOSTILE, *LINES[3:]]))

        async def waiting() -> bool:
            state = await runner.status(handle.id)
            return state is not None and state.status == "waiting_for_callback"

        await wait_until(waiting, timeout=DEADLINE)
        url = None
        async for info in runner.store.scan(runner.layout.memos(handle.id)):
            memo = PositionedMemo.decode((await runner.store.get(info.key)).data)
            if memo.call.call == "callback":
                incarnation, segment = info.key.split("/")[-2:]
                callback_id = str(CallbackId.of(handle.id, incarnation, segment))
                url = unpack_stored(memo.value)["url"]
    await runner.close()
    yield Narrating(store_url, handle.id, callback_id, url)


@pytest.fixture
def viewer(narrating: Narrating, tmp_path: Path) -> Iterator[str]:
    with serve(narrating.store, tmp_path) as url:
        yield url


@pytest.fixture
def operator(narrating: Narrating, tmp_path: Path) -> Iterator[str]:
    with serve(narrating.store, tmp_path, "--allow-actions") as url:
        yield url


@pytest.mark.parametrize("store_url", ["dir", "s3"], indirect=True)
async def test_a_runs_page_shows_its_streams_and_callbacks_and_never_a_url(
    narrating: Narrating, viewer: str, browser: Any
) -> None:
    browser.get(f"{viewer}runs/{narrating.run_id}")
    wait_for(lambda: "Streams" in text(browser, "#streams h2"), "the streams section")
    assert "story" in text(browser, "#streams h3") and "10 write(s), open" in text(
        browser, "#streams h3"
    )
    shown = texts(browser, "#streams tr.item")
    assert len(shown) == 5, shown  # the last five
    assert shown[-1].startswith("9") and "chapter" in shown[-1] and "<script>" in shown[-1]
    [callback] = texts(browser, "#callbacks tr.callback")
    assert "go" in callback and "waiting" in callback and narrating.callback_id in callback
    if "s3://" in narrating.store:
        assert narrating.url is not None and "X-Amz-Signature" in narrating.url
    assert "X-Amz-Signature" not in browser.page_source, "a callback's URL is on the page"
    never_ran_injected_script(browser)

    click(browser, "#streams h3 a", "story")
    wait_for(lambda: "/streams/story" in browser.current_url, "the stream's page")
    items = texts(browser, "table.items tr.item")
    assert [row.split("\t")[0] for row in items] == [str(n) for n in range(10)]
    assert any("<script>" in row for row in items), "hostile text not shown as text"
    never_ran_injected_script(browser)
    browser.get(f"{viewer}runs/{narrating.run_id}/streams/story?from=8")
    assert [r.split("\t")[0] for r in texts(browser, "table.items tr.item")] == ["8", "9"]


async def test_an_operator_completes_a_callback_from_the_page(
    narrating: Narrating, operator: str, browser: Any
) -> None:
    browser.get(f"{operator}runs/{narrating.run_id}")
    wait_for(lambda: bool(texts(browser, "#callbacks form.callback")), "the completion form")
    fill(browser, "#callbacks form.callback", {"payload": '{"by": "ops", "ok": true}'})
    click(browser, "#callbacks form.callback button")
    confirm(
        browser,
        f"Complete callback {narrating.callback_id} of waiting_for_callback run "
        f'{narrating.run_id} (orders.narrate) with {{"by": "ops", "ok": true}}?',
    )
    assert text(browser, "section.result") == (
        f"completed callback {narrating.callback_id}; its run is woken"
    )
    [audited] = texts(browser, "#audit tbody tr")
    said = " ".join(audited.split())
    assert f"operator 127.0.0.1 callback callback {narrating.callback_id} done" in said, said
    async with narrating.runner() as runner:  # a worker, to take the run up again
        result = await runner.handle(narrating.run_id, Narrate).result(timeout=DEADLINE)
    assert result == {"came": {"by": "ops", "ok": True}}
    browser.get(f"{operator}runs/{narrating.run_id}")
    wait_for(lambda: "completed" in text(browser, "#callbacks tr.callback"), "completed")
    assert "closed" in text(browser, "#streams h3")
