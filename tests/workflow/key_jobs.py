"""The jobs of the runs-by-key tests: the worker (in the test process) runs
them; the API process (key_api.py) and the CLI never import this module."""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel

from stepstone import Job, JobContext, Permanent


class Approval(BaseModel):
    by: str


class Stored(BaseModel):
    doc: str
    approved_by: str
    stores: int


class Ingest(Job[Stored]):
    """Fetches a document, waits for its approval (an event), then stores it."""

    NAME: ClassVar[str] = "keys.ingest"
    doc: str

    def idempotency_key(self) -> str:
        return f"doc:{self.doc}"

    async def run(self, ctx: JobContext) -> Stored:
        async def fetch(doc: str) -> str:
            return f"text of {doc}"

        async def store(text: str) -> int:
            marks = Path(os.environ["KEYS_DIR"]) / f"stores-{self.doc}"
            with marks.open("a") as out:
                out.write(text + "\n")
            return len(marks.read_text().splitlines())

        text = await ctx.step("fetch", fetch, self.doc)
        approval = await ctx.wait_for_event("approved", type=Approval)
        assert approval is not None
        stores = await ctx.step("store", store, text)
        return Stored(doc=self.doc, approved_by=approval.by, stores=stores)


class Picky(Job[int]):
    """Fails for good until the file ``allow-<n>`` exists."""

    NAME: ClassVar[str] = "keys.picky"
    n: int

    def idempotency_key(self) -> str:
        return f"picky:{self.n}"

    async def run(self, ctx: JobContext) -> int:
        if not (Path(os.environ["KEYS_DIR"]) / f"allow-{self.n}").exists():
            raise Permanent(f"picky {self.n} is not allowed yet")
        return self.n
