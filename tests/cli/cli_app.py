"""The application the CLI tests point ``stepstone worker`` and ``--app`` at.

Its jobs coordinate with the test through files in ``CLI_TEST_DIR`` (a real
directory shared by the test and the worker process), never through timing.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import ClassVar

from stepstone import Job, JobContext, JobRunner, Permanent, Schedule
from stepstone.runtime import SqsQueue
from stepstone.testing import wait_until

DEADLINE_NOTE = "not a runner"


def _dir() -> Path:
    return Path(os.environ["CLI_TEST_DIR"])


def _bump(name: str) -> None:
    """Count an execution in a file (one line per run), visible across processes."""
    with (_dir() / f"count-{name}").open("a") as f:
        f.write("x\n")


def count(name: str) -> int:
    path = _dir() / f"count-{name}"
    return len(path.read_text().splitlines()) if path.exists() else 0


class Greet(Job[str]):
    NAME: ClassVar[str] = "cli.greet"
    name: str

    async def run(self, ctx: JobContext) -> str:
        async def lookup(who: str) -> dict[str, str]:
            return {"who": who, "lang": "en"}

        async def compose(info: dict[str, str]) -> str:
            return f"hello {info['who']}"

        info = await ctx.step("lookup", lookup, self.name)
        ctx.progress({"done": 1, "of": 2})
        text = await ctx.step("compose", compose, info)
        ctx.progress({"done": 2, "of": 2})
        return text


class Boom(Job[int]):
    """Records a step, then fails permanently unless ``allow-boom`` exists."""

    NAME: ClassVar[str] = "cli.boom"
    n: int

    def idempotency_key(self) -> str:
        return f"boom:{self.n}"

    async def run(self, ctx: JobContext) -> int:
        async def prepare(n: int) -> int:
            _bump("prepare")
            return n * 2

        doubled = await ctx.step("prepare", prepare, self.n)
        if not (_dir() / "allow-boom").exists():
            raise Permanent(f"boom {self.n}")
        return doubled


class Refuse(Job[int]):
    """Fails permanently with the message it was given (say, one full of escape sequences)."""

    NAME: ClassVar[str] = "cli.refuse"
    message: str

    async def run(self, ctx: JobContext) -> int:
        raise Permanent(self.message)


class Report(Job[int]):
    """A job type with a long NAME, submitted under the idempotency key it is
    given; fails permanently with ``message`` when there is one."""

    NAME: ClassVar[str] = "cli.reports.quarterly-revenue-reconciliation-by-region"
    key: str
    message: str = ""

    def idempotency_key(self) -> str:
        return self.key

    async def run(self, ctx: JobContext) -> int:
        if self.message:
            raise Permanent(self.message)
        return 1


class Flaky(Job[int]):
    """Fails its first attempt (a RuntimeError), then succeeds."""

    NAME: ClassVar[str] = "cli.flaky"
    n: int

    async def run(self, ctx: JobContext) -> int:
        marker = _dir() / f"flaked-{self.n}"
        if not marker.exists():
            marker.touch()
            raise RuntimeError(f"flaky {self.n}")
        return self.n


class Gated(Job[int]):
    """Says it started, then waits for ``release-<n>``: lets a test signal a
    worker while the job is in flight."""

    NAME: ClassVar[str] = "cli.gated"
    n: int

    async def run(self, ctx: JobContext) -> int:
        (_dir() / f"started-{self.n}").touch()
        # (another process makes it; a job that waited longer is stuck)
        await wait_until((_dir() / f"release-{self.n}").exists, timeout=300, interval=0.01)
        return self.n


class Chatty(Job[str]):
    """Writes ``words`` to stream ``words``, makes callback ``go`` (its id in
    the file ``callback-id``), and once it is completed writes what came and
    closes the stream."""

    NAME: ClassVar[str] = "cli.chatty"
    words: list[str]

    async def run(self, ctx: JobContext) -> str:
        words = ctx.stream("words")
        for word in self.words:
            await words.write(word)
        cb = await ctx.callback("go", timeout=3600)
        (_dir() / "callback-id").write_text(cb.id)
        came = await cb
        await words.write({"came": came})
        await words.close()
        return "done"


def make_runner() -> JobRunner:
    """The factory ``stepstone worker cli_app:make_runner`` calls."""
    return JobRunner(
        os.environ["STEPSTONE_STORE"],
        jobs=[Greet, Boom, Gated, Refuse, Flaky],
        poll_interval=0.05,
        retry_backoff=0.0,
        drain_timeout=30.0,
    )


def make_sqs_runner() -> JobRunner:
    """A runner on SQS, whose queue cannot list its jobs; nothing here sends a request."""
    queue = SqsQueue("cli-test", id_store=None, region="us-east-1")
    return JobRunner(os.environ["STEPSTONE_STORE"], jobs=[Greet], queue=queue)


runner = make_runner() if "STEPSTONE_STORE" in os.environ and "CLI_TEST_DIR" in os.environ else None


class Nap(Job[str]):
    """Sleeps a day, durably: ``stepstone show`` sees it sleeping."""

    NAME: ClassVar[str] = "cli.nap"

    async def run(self, ctx: JobContext) -> str:
        await ctx.sleep(86_400)
        return "rested"


def make_scheduled_runner() -> JobRunner:
    """A runner with two schedules, for ``stepstone schedules``."""
    return JobRunner(
        os.environ["STEPSTONE_STORE"],
        jobs=[Greet, Nap],
        schedules=[
            Schedule("greet-hourly", every=timedelta(hours=1), job=lambda t: Greet(name="hour")),
            Schedule(
                "greet-mornings",
                cron="0 9 * * 1-5",
                timezone="Europe/Paris",
                job=lambda t: Greet(name="morning"),
            ),
        ],
    )
