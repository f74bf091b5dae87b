"""A run at a glance, on its page in a real headless browser and in
``stepstone show``: a wait's times as dates, never epoch numbers; an event's
payload decoded as a step's value is; a suspended claim shown as waiting,
not as an error; a traceback with the job's own frames first and
stepstone's folded."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_browser import screenshot_of, text, texts
from ui_jobs import Patient, Retried
from ui_kit import DEADLINE, Runs

from stepstone import JobRunner
from stepstone.testing import wait_until

EPOCH = re.compile(r"\b1[0-9]{9}(\.[0-9]+)?\b")
"""An epoch time in seconds, as a person should never have to read one."""


@dataclass
class Waited:
    patient: str
    retried: str


@pytest.fixture
async def waited(runs: Runs) -> AsyncIterator[Waited]:
    """A run that slept, waited for an event and got it; one that failed
    twice before it succeeded."""
    async with JobRunner(
        runs.store, jobs=[Patient, Retried], retry_backoff=0.0, poll_interval=0.05
    ) as runner:
        patient = await runner.submit(Patient())

        async def parked() -> bool:
            state = await runner.status(patient.id)
            return state is not None and state.status == "waiting_for_event"

        await wait_until(parked, timeout=DEADLINE)
        await runner.send_event(patient.id, "approval", {"by": "ops"})
        assert await patient.result(timeout=DEADLINE) == "approved by ops"
        retried = await runner.submit(Retried())
        assert await retried.result(timeout=DEADLINE) == "done"
    yield Waited(patient.id, retried.id)


async def test_a_runs_page_shows_waits_as_dates_and_events_decoded(
    runs: Runs, waited: Waited, ui: str, browser: Any
) -> None:
    browser.get(f"{ui}runs/{waited.patient}")
    steps = dict(
        zip(
            texts(browser, "table.steps tr.step td.name"),
            texts(browser, "table.steps tr.step pre"),
            strict=True,
        )
    )
    assert list(steps) == ["sleep", "event approval"]
    assert re.fullmatch(r"until 20\d\d-\d\d-\d\d \d\d:\d\d:\d\dZ", steps["sleep"])
    assert '"payload": {\n    "by": "ops"\n  }' in steps["event approval"]
    assert "bytes>" not in text(browser, "main")
    assert not EPOCH.search(text(browser, "main")), text(browser, "main")
    # The claims that suspended are waiting, not errors.
    waiting = texts(browser, "article.attempt.result-suspended p.waiting")
    assert waiting and all(line.startswith("waiting: ") for line in waiting), waiting
    assert (
        browser.execute_script(
            "return document.querySelectorAll('article.result-suspended .error-message').length"
        )
        == 0
    )

    browser.get(f"{ui}runs/{runs.sleeping}")  # asleep now: its wake time, a date
    assert re.search(r"until 20\d\d-\d\d-\d\d", text(browser, "table.steps"))


async def test_a_traceback_shows_the_jobs_frames_first_and_folds_stepstones(
    waited: Waited, ui: str, browser: Any
) -> None:
    browser.get(f"{ui}runs/{waited.retried}")
    shown = texts(browser, "article.result-failed pre.traceback:not(.folded)")
    assert len(shown) == 2
    for trace in shown:
        lines = trace.splitlines()
        assert lines[0] == "Traceback (most recent call last):"
        assert "ui_jobs.py" in lines[1] and "in run" in lines[1], trace
        assert lines[-1].startswith("ConnectionError: attempt ")
        assert "stepstone" not in trace.replace("ui_jobs.py", "")
    folded = texts(browser, "article.result-failed details.engine-frames summary")
    assert folded == ["4 frame(s) of stepstone above these"] * 2


def show(store: str, run_id: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "stepstone", "show", run_id, "--store", store],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_show_in_the_terminal_looks_the_same(runs: Runs, waited: Waited) -> None:
    said = show(runs.store, waited.patient)
    assert re.search(r"\bsleep\b.*until 20\d\d-\d\d-\d\d \d\d:\d\d:\d\dZ", said), said
    assert re.search(r'event approval .*\{"payload": \{"by": "ops"\}', said), said
    assert not EPOCH.search(said) and "bytes>" not in said, said
    assert "waiting: " in said

    said = show(runs.store, waited.retried)
    trace = said[said.index("traceback:\n") :].splitlines()
    assert "4 frame(s) of stepstone above these" in trace[1]
    assert trace[2].strip() == "Traceback (most recent call last):"
    assert "ui_jobs.py" in trace[3], said
    assert "\x1b" not in said and "\\x1b" in said  # the job's text, escaped


TIMELINE = """const svg = document.querySelector("figure.chart svg.timeline");
if (!svg) return null;
const titles = (selector) => [...svg.querySelectorAll(selector)].map(
    (e) => e.querySelector("title").textContent);
return {claims: titles("rect.lane-0"), waits: titles("rect.lane-1"),
        steps: titles("circle.step"),
        ticks: [...svg.querySelectorAll("text.tick")].map((t) => t.textContent)};"""


async def test_a_runs_timeline_draws_its_claims_waits_and_steps_on_one_axis(
    waited: Waited, ui: str, browser: Any, tmp_path: Path
) -> None:
    browser.get(f"{ui}runs/{waited.patient}")
    drawn = browser.execute_script(TIMELINE)
    assert drawn is not None, "no timeline drawn"
    # Three claims: one that slept, one that waited for the event, one that finished.
    assert len(drawn["claims"]) == 3, drawn
    assert drawn["claims"][0].startswith("claim 1: suspended, 20")
    assert drawn["claims"][-1].startswith("claim 3: succeeded, 20")
    assert len(drawn["waits"]) == 2 and all(w.startswith("waiting: ") for w in drawn["waits"])
    assert [step.split(",")[0] for step in drawn["steps"]] == ["sleep", "event approval"]
    assert re.fullmatch(r"20\d\d-\d\d-\d\d \d\d:\d\d:\d\dZ", drawn["ticks"][0])
    assert all(tick.startswith("+") for tick in drawn["ticks"][1:])
    assert not EPOCH.search(" ".join(drawn["claims"] + drawn["waits"] + drawn["steps"]))
    screenshot = tmp_path / "ui-run.png"
    screenshot_of(browser, "main", screenshot)
