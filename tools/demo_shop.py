"""The demo shop whose runs the console's screenshots show (tools/screenshots.py):
charges on a card network that times out once and declines one card,
shipments, refunds waiting for approval, onboardings that sleep for days,
monthly invoicing with children, long exports and account syncs under a
concurrency key, and two schedules.

tools/screenshots.py loads this file as ``shop/jobs.py``, so the tracebacks
the pictures show name an application's file, not this repository's.
"""

from __future__ import annotations

import asyncio
import os
import random
from datetime import timedelta
from typing import Any, ClassVar

from pydantic import BaseModel

from stepstone import Job, JobContext, JobRunner, Permanent, Schedule


class CardDeclined(Permanent):
    """The card network refused the charge: retrying would not help."""


class Receipt(BaseModel):
    id: str
    cents: int
    currency: str


class CardNetwork:
    """Stands in for a payment provider: slow now and then, timing out on
    the first try of one charge, declining one card."""

    def __init__(self) -> None:
        self.timed_out: set[str] = set()

    async def quote(self, order: str, cents: int) -> int:
        await asyncio.sleep(0.02 + random.random() * 0.05)
        return cents + cents // 5

    async def charge(self, order: str, cents: int, key: str) -> Receipt:
        await asyncio.sleep(0.08 + random.random() * 0.2)
        if order == "o-1042" and order not in self.timed_out:
            self.timed_out.add(order)
            raise TimeoutError("card network did not answer within 10 s")
        if order == "o-1047":
            raise CardDeclined("card ending 0019 declined: insufficient funds")
        return Receipt(id=f"ch_{key[:14]}", cents=cents, currency="EUR")


NETWORK = CardNetwork()


async def email(to: str, template: str) -> str:
    await asyncio.sleep(0.03)
    return f"queued {template} for {to}"


class ChargeOrder(Job[str]):
    NAME: ClassVar[str] = "orders.charge"
    VERSION: ClassVar[str] = "2026.11.3"
    order: str
    cents: int

    def idempotency_key(self) -> str:
        return f"charge:{self.order}"

    async def run(self, ctx: JobContext) -> str:
        total = await ctx.step("quote", NETWORK.quote, self.order, self.cents)
        key = ctx.idempotency_key("charge")
        receipt = await ctx.step("charge", NETWORK.charge, self.order, total, key)
        await ctx.step("receipt", email, f"customer-{self.order}@example.com", "receipt")
        return receipt.id


class ShipOrder(Job[str]):
    NAME: ClassVar[str] = "orders.ship"
    VERSION: ClassVar[str] = "2026.11.3"
    order: str

    def idempotency_key(self) -> str:
        return f"ship:{self.order}"

    async def run(self, ctx: JobContext) -> str:
        async def reserve(order: str) -> str:
            await asyncio.sleep(0.05)
            return f"shelf B-{len(order) * 7}"

        async def label(order: str) -> str:
            await asyncio.sleep(0.1)
            return f"1Z999AA1{abs(hash(order)) % 10**8:08d}"

        await ctx.step("reserve stock", reserve, self.order)
        tracking = await ctx.step("buy label", label, self.order)
        await ctx.step("notify customer", email, f"customer-{self.order}@example.com", "shipped")
        return tracking


class Approval(BaseModel):
    approved: bool
    by: str


class RefundOrder(Job[str]):
    NAME: ClassVar[str] = "orders.refund"
    order: str
    cents: int

    def idempotency_key(self) -> str:
        return f"refund:{self.order}"

    async def run(self, ctx: JobContext) -> str:
        decision = await ctx.wait_for_event("approval", timeout=7 * 86_400, type=Approval)
        if decision is None or not decision.approved:
            return "refused"
        return f"refunded {self.cents} cents, approved by {decision.by}"


class Onboarding(Job[str]):
    NAME: ClassVar[str] = "users.onboarding"
    user: str

    def idempotency_key(self) -> str:
        return f"onboarding:{self.user}"

    async def run(self, ctx: JobContext) -> str:
        await ctx.step("welcome", email, self.user, "welcome")
        await ctx.sleep(3 * 86_400)
        await ctx.step("nudge", email, self.user, "how-is-it-going")
        return "onboarded"


class Invoice(Job[int]):
    NAME: ClassVar[str] = "billing.invoice"
    customer: str
    month: str

    async def run(self, ctx: JobContext) -> int:
        async def render(customer: str) -> int:
            await asyncio.sleep(0.05)
            return 1200 + len(customer) * 100

        cents = await ctx.step("render", render, self.customer)
        await ctx.step("send", email, f"billing@{self.customer}.example", "invoice")
        return cents


class MonthlyInvoicing(Job[int]):
    NAME: ClassVar[str] = "billing.monthly"
    month: str

    def idempotency_key(self) -> str:
        return f"invoicing:{self.month}"

    async def run(self, ctx: JobContext) -> int:
        customers = ["initech", "globex", "umbrella", "hooli"]
        handles = [await ctx.submit(Invoice(customer=c, month=self.month)) for c in customers]
        return sum(await ctx.gather(*handles))


class ExportReport(Job[str]):
    NAME: ClassVar[str] = "reports.export"
    report: str

    async def run(self, ctx: JobContext) -> str:
        async def export(report: str) -> str:
            await asyncio.sleep(3600)  # long enough to be running in every picture
            return f"s3://acme-reports/{report}.csv"

        ctx.progress({"rows": 48_200, "of": 120_000})
        return await ctx.step("export", export, self.report)


class SyncAccount(Job[str]):
    NAME: ClassVar[str] = "crm.sync-account"
    account: str
    concurrency_limit: ClassVar[int] = 1

    def concurrency_key(self) -> str:
        return self.account

    async def run(self, ctx: JobContext) -> str:
        async def sync(account: str) -> str:
            await asyncio.sleep(3600)
            return f"synced {account}"

        return await ctx.step("sync", sync, self.account)


class ExpireCarts(Job[int]):
    NAME: ClassVar[str] = "carts.expire"
    tick: str

    async def run(self, ctx: JobContext) -> int:
        async def sweep() -> int:
            return 12

        return await ctx.step("sweep", sweep)


JOBS: list[type[Job[Any]]] = [
    ChargeOrder,
    ShipOrder,
    RefundOrder,
    Onboarding,
    Invoice,
    MonthlyInvoicing,
    ExportReport,
    SyncAccount,
    ExpireCarts,
]
SCHEDULES = [
    Schedule(
        "expire-carts",
        every=timedelta(minutes=1),
        job=lambda tick: ExpireCarts(tick=tick.isoformat()),
    ),
    Schedule(
        "nightly-exports",
        cron="30 2 * * *",
        timezone="Europe/Paris",
        job=lambda tick: ExportReport(report=f"orders-{tick.date().isoformat()}"),
    ),
]


def worker() -> JobRunner:
    """The runner ``stepstone worker shop.jobs:worker`` runs, on $STEPSTONE_STORE."""
    return JobRunner(
        os.environ["STEPSTONE_STORE"], jobs=JOBS, schedules=SCHEDULES, drain_timeout=1.0
    )
