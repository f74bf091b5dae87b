"""A large step result and job result round-trip on files, in memory and on
S3: the first run records them, a retry replays the step from its memo, a
handle in another runner reads the result; the records hold the same bytes
as a record packed whole (so readers of either form read both). On S3 also
with the records written in parts (``multipart_conditional``: moto holds it
for create-if-absent, not for If-Match, which its probe finds; the runners
are told it holds). The values: ``bytes``, and models (a large
non-ASCII ``str``; a list of nested models) whose encoding is made as it is
written, the store handed pieces of bounded size. Sizes are a few MiB, past
the size from which a value is written and read apart
(stepstone.records.large_values.SEPARATE); memory and time are measured in
benchmarks/big_values.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import BaseModel

from stepstone import Job, JobContext, JobRunner
from stepstone.records.codec import pack, unpack
from stepstone.records.large_values import SEPARATE
from stepstone.records.layout import position_key
from stepstone.records.piecewise import PIECE
from stepstone.store import FileStore, MemoryStore, ObjectStore
from stepstone.store.parts import Parts
from stepstone.store.s3.dialect import learned_for

DEADLINE = 60.0
SIZE = 3 * SEPARATE
PARTS = "&multipart_threshold=1048576&multipart_conditional=true"
"""Every record of a MiB or more in parts (of one part, here: S3's smallest is 5 MiB)."""

made: list[str] = []
"""Each time a step below ran (its job's NAME)."""


def make_bytes(size: int) -> bytes:
    made.append("bytes")
    return bytes(i % 251 for i in range(256)) * (size // 256)


class Text(BaseModel):
    text: str
    words: int


def make_text(size: int) -> Text:
    made.append("text")
    return Text(text="the quick brown fox " * (size // 20), words=4 * (size // 20))


class Cell(BaseModel):
    label: str
    weight: float | None


class Row(BaseModel):
    id: int
    cells: list[Cell]


class Table(BaseModel):
    title: str
    rows: list[Row]


def make_table(size: int) -> Table:
    made.append("table")
    rows = [
        Row(id=i, cells=[Cell(label=f"ç{i:0300d}", weight=i / 7 if i % 3 else None)] * 2)
        for i in range(size // 600)
    ]
    return Table(title="naïve ✓", rows=rows)


def make_words(size: int) -> Text:
    made.append("words")
    return Text(text="héllo wörld ✓ 𝄞 " * (size // 24), words=4 * (size // 24))


class LargeBytes(Job[bytes]):
    NAME: ClassVar[str] = "test.large.bytes"
    size: int

    async def run(self, ctx: JobContext) -> bytes:
        value = await ctx.step("make", make_bytes, self.size)
        if ctx.attempt == 1:
            raise RuntimeError("fail once, after the step")
        return value


class LargeText(Job[Text]):
    NAME: ClassVar[str] = "test.large.text"
    size: int

    async def run(self, ctx: JobContext) -> Text:
        value = await ctx.step("make", make_text, self.size)
        if ctx.attempt == 1:
            raise RuntimeError("fail once, after the step")
        return value


class LargeTable(Job[Table]):
    NAME: ClassVar[str] = "test.large.table"
    size: int

    async def run(self, ctx: JobContext) -> Table:
        value = await ctx.step("make", make_table, self.size)
        if ctx.attempt == 1:
            raise RuntimeError("fail once, after the step")
        return value


class LargeWords(Job[Text]):
    NAME: ClassVar[str] = "test.large.words"
    size: int

    async def run(self, ctx: JobContext) -> Text:
        value = await ctx.step("make", make_words, self.size)
        if ctx.attempt == 1:
            raise RuntimeError("fail once, after the step")
        return value


@pytest.fixture(params=["files", "memory", "s3", "s3-in-parts"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | ObjectStore:
    if request.param == "memory":
        return MemoryStore()  # (one store for both runners below)
    if request.param == "files":
        FileStore(tmp_path / "store")  # (creates the directory)
        return str(tmp_path / "store")
    url: str = request.getfixturevalue("s3_url")
    if request.param == "s3-in-parts":
        # moto holds If-None-Match on a multipart completion but not If-Match,
        # so a store's probe would refuse multipart_conditional there: these
        # runners are told what a provider holding both would have shown.
        learned_for(
            request.getfixturevalue("moto_server"), request.getfixturevalue("s3_bucket")
        ).multipart_conditions = True
        return url + PARTS
    return url


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (LargeBytes(size=SIZE), make_bytes(SIZE)),
        (LargeText(size=SIZE), make_text(SIZE)),
        (LargeWords(size=SIZE), make_words(SIZE)),
        (LargeTable(size=SIZE), make_table(SIZE)),
    ],
    ids=["bytes", "model", "non-ascii", "nested"],
)
async def test_a_large_result_is_recorded_replayed_and_read_back(
    store_url: str | ObjectStore, job: Job[object], expected: object
) -> None:
    made.clear()
    kind = made_by[type(job)]
    async with JobRunner(store_url, jobs=[type(job)], retry_backoff=0.0) as runner:
        handle = await runner.submit(job)
        assert await handle.result(timeout=DEADLINE) == expected
        outcome = await runner.outcome(handle.id, type(expected))
        assert outcome is not None and outcome.attempts == 2
        incarnation = await _incarnation(runner, handle.id)
        memo = await runner.store.get(runner.layout.memo(handle.id, incarnation, position_key(1)))
        record = unpack(memo.data)
        stored = await runner.store.get(runner.layout.outcome(handle.id))
    assert made == [kind]  # once: the retry replayed it
    if isinstance(store_url, str) and store_url.startswith("s3://"):  # (a multipart
        # upload's etag ends in -<parts>)
        assert memo.etag.endswith('-1"') == store_url.endswith(PARTS)
    assert memo.data == pack(record)  # the form a record packed whole has
    assert unpack(record["value"]) == unpack(unpack(stored.data)["result"])
    async with JobRunner(store_url, jobs=[type(job)]) as other:  # a runner with no memory of it
        assert await other.handle(handle.id, type(job)).result(timeout=DEADLINE) == expected


made_by = {LargeBytes: "bytes", LargeText: "text", LargeWords: "words", LargeTable: "table"}


class Recording(FileStore):
    """A FileStore that notes the size of each buffer a body of parts hands it."""

    handed: list[int]

    async def put_parts(
        self, key: str, parts: Parts, *, if_absent: bool = False, if_match: str | None = None
    ) -> str:
        self.handed.extend(len(chunk) for chunk in parts.chunks())
        return await super().put_parts(key, parts, if_absent=if_absent, if_match=if_match)


@pytest.mark.parametrize(
    "job", [LargeWords(size=4 * SIZE), LargeTable(size=2 * SIZE)], ids=["non-ascii", "nested"]
)
async def test_a_large_model_is_handed_to_the_store_in_bounded_pieces(
    tmp_path: Path, job: Job[object]
) -> None:
    store = Recording(tmp_path / "store")
    store.handed = []
    async with JobRunner(store, jobs=[type(job)], retry_backoff=0.0) as runner:
        handle = await runner.submit(job)
        await handle.result(timeout=DEADLINE)
    outcome = await store.head(runner.layout.outcome(handle.id))
    assert sum(store.handed) > 1.9 * outcome.size  # the memo, then the outcome, in pieces
    assert max(store.handed) <= PIECE + 8  # never the encoding whole


async def _incarnation(runner: JobRunner, run_id: str) -> str:
    stored = await runner.store.get(runner.layout.outcome(run_id))
    incarnation: str = unpack(stored.data)["incarnation"]
    return incarnation
