"""A job's result is checked against its declared output type by the worker:
a result of another type fails the run for good, naming the job and the type
it declares, instead of succeeding with a result no handle can read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from stepstone import Job, JobContext, JobFailed, JobRunner

MakeRunner = Callable[..., JobRunner]
DEADLINE = 10.0


class Point(BaseModel):
    x: int
    y: int


class SaysInt(Job[int]):
    NAME: ClassVar[str] = "test.says-int"

    async def run(self, ctx: JobContext) -> int:
        return "x"  # type: ignore[return-value]


class SaysListOfInts(Job[list[int]]):
    NAME: ClassVar[str] = "test.says-list-of-ints"

    def run(self, ctx: JobContext) -> list[int]:  # synchronous, in a thread
        return ["a", "b"]  # type: ignore[list-item]


class SaysPoint(Job[Point]):
    NAME: ClassVar[str] = "test.says-point"

    async def run(self, ctx: JobContext) -> Point:
        return {"x": 1}  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("job", "expected"),
    [(SaysInt(), "int"), (SaysListOfInts(), "list[int]"), (SaysPoint(), "Point")],
)
async def test_a_result_of_another_type_than_declared_fails_the_run_naming_both(
    make_runner: MakeRunner, job: Job[Any], expected: str
) -> None:
    async with make_runner(jobs=[type(job)]) as runner:
        handle = await runner.submit(job)
        with pytest.raises(JobFailed) as failed:
            await handle.result(timeout=DEADLINE)
    assert failed.value.reason == "permanent"
    assert failed.value.error_type == "stepstone.errors.EncodingError"
    assert job.NAME in failed.value.message
    assert f"declared output type {expected}" in failed.value.message
    assert (await handle.join()).attempts == 1


class SaysIntRightly(Job[int]):
    NAME: ClassVar[str] = "test.says-int-rightly"

    async def run(self, ctx: JobContext) -> int:
        return 7


async def test_a_result_of_the_declared_type_succeeds(make_runner: MakeRunner) -> None:
    async with make_runner(jobs=[SaysIntRightly]) as runner:
        assert await (await runner.submit(SaysIntRightly())).result(timeout=DEADLINE) == 7
