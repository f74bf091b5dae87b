"""stepstone in one file: a job with memoized steps, a retry that replays
them, and an idempotent resubmission, on a local directory (no cloud).

    python examples/quickstart.py [DIRECTORY or STORE URL]

Point DIRECTORY at the same place twice and the second run answers from the
first run's outcome record without charging anyone again.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from typing import ClassVar

from pydantic import BaseModel

from stepstone import Job, JobContext, JobRunner


class Quote(BaseModel):
    cents: int
    currency: str


class Receipt(BaseModel):
    id: str
    cents: int


class PaymentNetwork:
    """Stands in for a card network that times out on its first call."""

    def __init__(self) -> None:
        self.quotes = 0
        self.attempts = 0
        self.charges = 0

    async def quote(self, order_id: str) -> Quote:
        self.quotes += 1
        print(f"  [network] quoting {order_id}")
        return Quote(cents=1250, currency="EUR")

    async def charge(self, order_id: str, quote: Quote) -> Receipt:
        self.attempts += 1
        if self.attempts == 1:
            print("  [network] charge timed out (the job will be retried)")
            raise TimeoutError("card network timed out")
        self.charges += 1
        print(f"  [network] charged {quote.cents} {quote.currency} for {order_id}")
        return Receipt(id=f"rcpt-{order_id}", cents=quote.cents)


class ChargeOrder(Job[str]):
    NAME: ClassVar[str] = "orders.charge"
    order_id: str

    def idempotency_key(self) -> str:
        return f"charge:{self.order_id}"

    async def run(self, ctx: JobContext) -> str:
        network = ctx.state(PaymentNetwork)
        print(f"  [job] attempt {ctx.attempt} of {self.order_id}")
        quote = await ctx.step("quote", network.quote, self.order_id)
        receipt = await ctx.step("charge", network.charge, self.order_id, quote)
        return receipt.id


async def main(directory: str) -> None:
    if "://" not in directory:  # (or a store URL: s3://bucket/prefix?endpoint_url=...)
        os.makedirs(directory, exist_ok=True)  # a store URL names a store; it creates none
    network = PaymentNetwork()
    runner = JobRunner(
        directory, jobs=[ChargeOrder], state=[network], retry_backoff=0.1, poll_interval=0.1
    )
    async with runner:
        print(f"store: {directory}\n")
        print("1. submit ChargeOrder(o-1) and await it")
        handle = await runner.submit(ChargeOrder(order_id="o-1"))
        receipt = await handle
        outcome = await handle.join()
        print(f"   -> {receipt} after {outcome.attempts} attempt(s)")
        print(f"      in this process: {network.quotes} quote(s), {network.charges} charge(s);")
        if handle.newly_submitted:
            print("      the retry replayed the quote from its memo instead of asking again")
            print(f"      (run it again with: python examples/quickstart.py {directory})\n")
        else:
            print("      an earlier run in this directory already did it: nothing ran\n")

        print("2. submit the same order again (same idempotency key)")
        again = await runner.submit(ChargeOrder(order_id="o-1"))
        result = await again
        print(f"   -> newly_submitted={again.newly_submitted}, same id: {again.id == handle.id},")
        print(f"      result {result}, answered from the outcome record;")
        print(
            f"      still {network.quotes} quote(s), {network.charges} charge(s) in this process\n"
        )

        state = await again.status()
        assert state is not None
        print(f"3. status of {again.id[:12]}...: {state.status}, {state.attempts} attempt(s)")


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="stepstone-")
    asyncio.run(main(target))
