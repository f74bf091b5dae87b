"""The web view's run page names a run's parent and children, says a cancel
takes the live children with it, and a child cancelled so says why; a
parent's timeline draws its children, each linked to its page, whose page
links back to the parent."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path
from typing import Any, ClassVar

from ui_kit import DEADLINE, serve, wait_for

from stepstone import Job, JobContext, JobRunner, JobStatus
from stepstone.testing import wait_until


class Leaf(Job[Any]):
    NAME: ClassVar[str] = "ui.family.leaf"
    key: str

    def idempotency_key(self) -> str:
        return f"leaf:{self.key}"

    async def run(self, ctx: JobContext) -> Any:
        return await ctx.wait_for_event("go")


class Stem(Job[list[Any]]):
    NAME: ClassVar[str] = "ui.family.stem"

    async def run(self, ctx: JobContext) -> list[Any]:
        return await ctx.gather(*[await ctx.submit(Leaf(key=f"leaf-{i}")) for i in range(2)])


def page(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        body: str = response.read().decode()
        return body


async def _waiting(runner: JobRunner, run_id: str) -> bool:
    state = await runner.status(run_id)
    return state is not None and state.status is JobStatus.WAITING_FOR_EVENT


def family(store: Path) -> JobRunner:
    store.mkdir()
    return JobRunner(str(store), jobs=[Stem, Leaf], poll_interval=0.05, concurrency=3)


async def stem_waiting(runner: JobRunner) -> tuple[Any, list[str]]:
    """A Stem run, and the ids of its two Leaf children, once both wait for their event."""
    stem = await runner.submit(Stem())
    leaves = [runner.handle(Leaf(key=f"leaf-{i}")).id for i in range(2)]
    for leaf in leaves:
        await wait_until(lambda r=leaf: _waiting(runner, r), timeout=DEADLINE)
    return stem, leaves


async def test_the_run_page_names_parent_and_children_and_why_a_child_was_cancelled(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    runner = family(store)
    async with runner:
        stem, leaves = await stem_waiting(runner)
        assert await runner.cancel(stem.id) is True
    with serve(str(store), tmp_path) as url:
        html = page(f"{url}runs/{stem.id}")
        assert "<dt>Children</dt>" in html
        assert all(f'runs/{leaf}"' in html for leaf in leaves)
        assert "a cancel takes the live ones it created with it" in html
        html = page(f"{url}runs/{leaves[0]}")
        assert f'runs/{stem.id}"' in html and "<dt>Parent</dt>" in html
        assert f"the job was cancelled with its parent {stem.id}" in html


CHILDREN = """const svg = document.querySelector("figure.chart svg.timeline");
return [...svg.querySelectorAll("a.child")].map((a) => [
    a.getAttribute("href"), a.querySelector("title").textContent]);"""


async def test_a_parents_timeline_draws_its_children_each_linked_to_its_page(
    tmp_path: Path, browser: Any
) -> None:
    store = tmp_path / "store"
    runner = family(store)
    async with runner:
        stem, leaves = await stem_waiting(runner)
        await runner.send_event(leaves[0], "go", {"ok": 1})
        await runner.send_event(leaves[1], "go", {"ok": 2})
        assert await stem.result(timeout=DEADLINE) == [{"ok": 1}, {"ok": 2}]
    with serve(str(store), tmp_path) as url:
        browser.get(f"{url}runs/{stem.id}")
        drawn = browser.execute_script(CHILDREN)
        assert sorted(href for href, _ in drawn) == sorted(f"/runs/{leaf}" for leaf in leaves)
        for _, title in drawn:
            assert re.fullmatch(
                r"child [0-9a-f]{12} \(ui\.family\.leaf\): succeeded, from "
                r"20\d\d-\d\d-\d\d \d\d:\d\d:\d\dZ, .+",
                title,
            ), title
        browser.execute_script(
            'document.querySelector("svg.timeline a.child").dispatchEvent('
            'new MouseEvent("click", {bubbles: true}))'
        )
        wait_for(lambda: "/runs/" + stem.id not in browser.current_url, "the child's page")
        assert browser.current_url.split("/runs/")[1] in leaves
        back = browser.find_element("css selector", "dl a[href='/runs/" + stem.id + "']")
        assert back.text == stem.id[:12]
