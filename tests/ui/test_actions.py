"""The web view's actions, in a real headless browser: off unless the view
is started with ``--allow-actions``; each confirmed on a page naming what it
will do, then a POST carrying the view's CSRF token, then a line saying what
was done. A POST without the token changes nothing.

Replay from a step is here too: an ended run runs again as a new
incarnation, keeping the memos before the step chosen.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from test_browser import click, never_ran_injected_script, rows, text, texts
from ui_jobs import Approve, Explode, Ship
from ui_kit import DEADLINE, Runs, serve, status_of, wait_for

from stepstone import JobRunner, SubmitOptions
from stepstone.testing import wait_until


@dataclass
class Acting:
    store: str
    dead: str
    waiting: str
    scheduled: str

    def runner(self) -> JobRunner:
        return JobRunner(self.store, jobs=[Ship, Explode, Approve], retry_backoff=0.0)

    async def status(self, run_id: str) -> str:
        return await status_of(self.store, run_id)


@pytest.fixture
async def acting(store_url: str) -> AsyncIterator[Acting]:
    """A store (a directory, or S3 on moto with ``store_url`` ``"s3"``) with a
    dead run, one waiting for an event and a scheduled one; nothing runs them
    once the fixture is made."""
    runner = JobRunner(store_url, jobs=[Ship, Explode, Approve], retry_backoff=0.0)
    async with runner:
        scheduled = await runner.submit(
            Ship(order="later"), SubmitOptions(run_at=datetime.now(UTC) + timedelta(hours=2))
        )
        dead = await runner.submit(Explode())
        assert not (await dead.join(timeout=DEADLINE)).ok
        waiting = await runner.submit(Approve())

        async def parked() -> bool:
            state = await runner.status(waiting.id)
            return state is not None and state.status == "waiting_for_event"

        await wait_until(parked, timeout=DEADLINE)
    yield Acting(store_url, dead.id, waiting.id, scheduled.id)


@pytest.fixture
def view_url(acting: Acting, tmp_path: Path) -> Iterator[str]:
    """``stepstone ui --allow-actions`` on the store."""
    with serve(acting.store, tmp_path, "--allow-actions") as url:
        yield url


def fill(browser: Any, form: str, values: dict[str, str]) -> None:
    """Fill in the fields of the form ``form`` finds, in one script (the live
    refresh can replace the form between a lookup and a keystroke; once a
    field differs from what the page gave, the refresh waits)."""
    filled = browser.execute_script(
        """const form = document.querySelector(arguments[0]);
        if (!form) return false;
        for (const [name, value] of Object.entries(arguments[1])) form.elements[name].value = value;
        return true;""",
        form,
        values,
    )
    assert filled, f"no form {form}"


def confirm(browser: Any, expected: str) -> str:
    """On a confirmation page: check it names what it will do, press its button."""
    wait_for(
        lambda: browser.current_url.split("?")[0].rsplit("/", 2)[-2] == "act", "a confirmation"
    )
    question = text(browser, "form.confirm p.question")
    assert expected in question, question
    click(browser, "form.confirm button")
    wait_for(lambda: "/act/" not in browser.current_url, "the action to be done")
    return question


async def test_retry_and_cancel_one_run_confirmed_with_a_result_line(
    acting: Acting, view_url: str, browser: Any
) -> None:
    browser.get(f"{view_url}runs/{acting.dead}")
    assert "actions on" in text(browser, "header")
    click(browser, "nav.actions a", "Retry…")
    question = confirm(browser, f"Retry dead run {acting.dead} (orders.explode)?")
    assert "finished steps replay" in question or "replay from their memos" in question
    assert browser.current_url.startswith(f"{view_url}runs/{acting.dead}?result=")
    assert text(browser, "section.result") == (
        f"requeued {acting.dead}: its failed outcome was removed; finished steps replay"
    )
    assert await acting.status(acting.dead) == "ready"
    never_ran_injected_script(browser)
    # No sign-in on this machine: the audit says so, with the address it came from.
    [audited] = texts(browser, "#audit tbody tr")
    assert "anonymous operator 127.0.0.1 retry done" in " ".join(audited.split())

    browser.get(f"{view_url}runs/{acting.scheduled}")
    click(browser, "nav.actions a", "Cancel…")
    confirm(browser, f"Cancel scheduled run {acting.scheduled} (orders.ship)?")
    assert text(browser, "section.result") == f"cancelled {acting.scheduled}"
    wait_for(lambda: "cancelled" in text(browser, "h1"), "the page to show it cancelled")
    assert await acting.status(acting.scheduled) == "cancelled"

    # Back, doing nothing: nothing is done.
    browser.get(f"{view_url}act/cancel?run={acting.waiting}")
    click(browser, "form.confirm a", "Back, doing nothing")
    wait_for(lambda: browser.current_url == f"{view_url}runs/{acting.waiting}", "the run's page")
    assert await acting.status(acting.waiting) == "waiting_for_event"


@pytest.mark.slow
@pytest.mark.parametrize("store_url", ["s3"], indirect=True)  # a store name, not a path
async def test_an_event_sent_from_the_page_reaches_the_waiting_run(
    acting: Acting, view_url: str, browser: Any, tmp_path: Path
) -> None:
    browser.get(f"{view_url}runs/{acting.waiting}")
    assert (
        browser.execute_script(
            "return document.querySelector('nav.actions form.event').elements.name.value"
        )
        == "approval"
    )  # the event the run waits for
    fill(browser, "nav.actions form.event", {"payload": '{"by": "ops", "ok": true}'})
    click(browser, "nav.actions form.event button")
    wait_for(lambda: "/act/event" in browser.current_url, "the confirmation")
    screenshot = tmp_path / "ui-confirm.png"
    assert browser.save_screenshot(str(screenshot))
    confirm(
        browser,
        """Send event 'approval' with {"by": "ops", "ok": true} to waiting_for_event """
        f"run {acting.waiting} (orders.approve)?",
    )
    assert text(browser, "section.result") == f"sent event 'approval' to {acting.waiting}"
    async with acting.runner() as runner:  # a worker, to take the run up again
        handle = runner.handle(acting.waiting, Approve)
        assert await handle.result(timeout=DEADLINE) == {"approved": {"by": "ops", "ok": True}}


async def test_bulk_retry_and_cancel_act_on_what_the_filter_shows(
    acting: Acting, view_url: str, browser: Any
) -> None:
    browser.get(f"{view_url}?state=dead")
    assert list(rows(browser)) == [acting.dead]
    click(browser, "nav.actions a", "Retry the dead runs shown…")
    confirm(browser, "Retry the 1 dead run(s) this list shows?")
    assert browser.current_url.startswith(f"{view_url}?state=dead&result=")
    assert text(browser, "section.result") == "requeued 1 of 1 run(s)"
    assert await acting.status(acting.dead) == "ready"

    browser.get(f"{view_url}?kind=orders.ship")
    assert list(rows(browser)) == [acting.scheduled]
    click(browser, "nav.actions a", "Cancel the runs shown…")
    confirm(browser, "Cancel the 1 run(s) of kind orders.ship this list shows?")
    assert text(browser, "section.result") == "cancelled 1 of 1 run(s)"
    assert await acting.status(acting.scheduled) == "cancelled"
    assert await acting.status(acting.waiting) == "waiting_for_event"  # not shown: untouched


def post(url: str, fields: dict[str, str] | None) -> tuple[int, str]:
    """Status and body of a POST of ``fields`` as a form (None: a GET)."""
    data = None if fields is None else urllib.parse.urlencode(fields).encode()
    request = urllib.request.Request(url, data=data, method="GET" if data is None else "POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


async def test_a_post_without_the_views_token_changes_nothing(
    acting: Acting, view_url: str
) -> None:
    for fields in ({"run": acting.dead}, {"run": acting.dead, "csrf": "guessed"}):
        status, page = post(f"{view_url}act/retry", fields)
        assert status == 403 and "did not carry this view&#39;s token" in page
    status, _ = post(f"{view_url}act/cancel", {"ids": acting.waiting})
    assert status == 403
    assert await acting.status(acting.dead) == "dead"
    assert await acting.status(acting.waiting) == "waiting_for_event"
    shown, _ = post(f"{view_url}act/retry?run={acting.dead}", None)
    assert shown == 200  # a confirmation changes nothing either
    assert await acting.status(acting.dead) == "dead"


async def test_actions_are_off_unless_the_view_is_started_with_them(
    acting: Acting, tmp_path: Path
) -> None:
    with serve(acting.store, tmp_path) as url:
        assert "read-only" in (tmp_path / "first-line").read_text()
        status, page = post(f"{url}runs/{acting.dead}", None)
        assert status == 200 and 'nav class="actions"' not in page
        for fields in (None, {"run": acting.dead}):
            status, page = post(f"{url}act/retry?run={acting.dead}", fields)
            assert status == 403 and "--allow-actions" in page
    assert await acting.status(acting.dead) == "dead"


async def test_an_ended_run_is_replayed_from_a_step_it_chose(
    runs: Runs, browser: Any, tmp_path: Path
) -> None:
    with serve(runs.store, tmp_path, "--allow-actions") as url:
        browser.get(f"{url}runs/{runs.succeeded}")
        fill(browser, "nav.actions form.replay", {"step": "label"})
        click(browser, "nav.actions form.replay button")
        confirm(
            browser,
            f"Replay succeeded run {runs.succeeded} (orders.ship) from step 'label'? "
            "It runs again as a new incarnation",
        )
        said = text(browser, "section.result")
        assert said.startswith(f"replaying {runs.succeeded} from step 'label' as incarnation ")
        assert "(1 memo(s) kept" in said  # pack's: the steps before label
        async with JobRunner(runs.store, jobs=[Ship], poll_interval=0.05) as runner:
            handle = runner.handle(runs.succeeded, Ship)
            assert await handle.result(timeout=DEADLINE) == "sent label-o-1"
        browser.get(f"{url}runs/{runs.dead}")  # dead: a replay from the start is offered
        offered = texts(browser, "nav.actions form.replay select option")
        assert offered == ["the start", "step note"]
