"""SubmitOptions(fairness_key=, fairness_weight=): a tenant's runs start
beside another tenant's backlog, not after it; a bad key is refused before
anything is written."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import pytest

from stepstone import Job, JobContext, JobRunner, SubmitOptions
from stepstone.testing import wait_until

pytestmark = pytest.mark.parametrize(
    "make_runner", ["memory-queue", "store-queue", "files"], indirect=True
)


class Started:
    """The runs in the order they started: (tenant, n)."""

    def __init__(self) -> None:
        self.order: list[tuple[str, int]] = []
        self.keys: list[str | None] = []


class Tenanted(Job[None]):
    NAME: ClassVar[str] = "test.tenanted"
    tenant: str
    n: int

    async def run(self, ctx: JobContext) -> None:
        started = ctx.state(Started)
        started.order.append((self.tenant, self.n))
        started.keys.append(ctx.headers.get("stepstone.fairness_key"))


async def test_a_tenants_runs_start_beside_another_tenants_backlog(
    make_runner: Callable[..., JobRunner],
) -> None:
    started = Started()
    api = make_runner(jobs=[Tenanted], state=[started])  # submits, runs no worker
    for n in range(40):
        await api.submit(Tenanted(tenant="a", n=n), SubmitOptions(fairness_key="tenant-a"))
    for n in range(2):
        await api.submit(Tenanted(tenant="b", n=n), SubmitOptions(fairness_key="tenant-b"))
    async with make_runner(jobs=[Tenanted], state=[started], concurrency=1):
        await wait_until(lambda: len(started.order) == 42, timeout=30)
    first = started.order[:4]
    assert ("b", 0) in first and ("b", 1) in first, started.order
    assert sorted(n for tenant, n in started.order if tenant == "a") == list(range(40))
    assert set(started.keys) == {"tenant-a", "tenant-b"}  # (ctx.headers shows it)


async def test_a_bad_fairness_key_is_refused_before_anything_is_written(
    make_runner: Callable[..., JobRunner],
) -> None:
    async with make_runner(jobs=[Tenanted], state=[Started()]) as runner:
        with pytest.raises(ValueError, match="fairness_key must be"):
            await runner.submit(Tenanted(tenant="x", n=0), SubmitOptions(fairness_key="a b"))
        with pytest.raises(ValueError, match="fairness_weight needs a fairness_key"):
            await runner.submit(Tenanted(tenant="x", n=0), SubmitOptions(fairness_weight=2))
        with pytest.raises(ValueError, match="reserved"):
            await runner.submit(
                Tenanted(tenant="x", n=0),
                SubmitOptions(headers={"stepstone.fairness_key": "sneaky"}),
            )
        from stepstone.runtime import JobListing

        assert isinstance(runner.queue, JobListing)
        assert (await runner.queue.list()).records == []
