"""Job types for the testing kit's own tests."""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

from pydantic import BaseModel

from stepstone import Job, JobContext
from stepstone.testing import fail_once


class Calls:
    """Application state: counts calls by name."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()


class Price(BaseModel):
    cents: int


def quote(sku: str) -> Price:
    return Price(cents=len(sku) * 100)


flaky_quote = fail_once(quote)
"""Made once, at import: the first call in the process fails. Tests reset it."""


class Checkout(Job[int]):
    NAME: ClassVar[str] = "kit.checkout"
    sku: str

    async def run(self, ctx: JobContext) -> int:
        calls = ctx.state(Calls)

        async def reserve(sku: str) -> str:
            calls.counts["reserve"] += 1
            return f"r-{sku}"

        await ctx.step("reserve", reserve, self.sku)
        price = await ctx.step("quote", flaky_quote, self.sku)
        assert isinstance(price, Price), "the step's result lost its type"
        return price.cents


class Echo(Job[str]):
    NAME: ClassVar[str] = "kit.echo"
    text: str

    async def run(self, ctx: JobContext) -> str:
        async def upper(text: str) -> str:
            return text.upper()

        return await ctx.step("upper", upper, self.text)
