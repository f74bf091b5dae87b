"""An HTTP API that takes orders idempotently and runs them as stepstone jobs.

    pip install -e '.[examples]' uvicorn
    mkdir -p orders-store && STEPSTONE_STORE=./orders-store uvicorn examples.api_server:app

    curl -si -X POST localhost:8000/orders -H 'Idempotency-Key: 7b1c-order-1' \\
         -H 'content-type: application/json' \\
         -d '{"customer": "ada", "items": [{"sku": "book", "quantity": 2}]}'
    curl -s localhost:8000/jobs/<run_id>

Why it is shaped this way:

- **The client's Idempotency-Key is the job's idempotency key.** A client
  that retries a POST after a timeout (it cannot know whether the first one
  landed) sends the same key and gets the same job back, running or
  finished, from this process or any other, before or after a restart;
  nothing runs twice. The key is part of the job's input, so the same key
  with a different body changes the input hash, and stepstone refuses it
  with ``InputMismatch``: answered 409, as the IETF Idempotency-Key draft
  asks, instead of silently returning the other order's result.
- **202 Accepted and a status URL**, not a held connection: the work runs in
  a worker (here the same process, for a one-file demo; in production,
  ``stepstone worker examples.api_server:make_runner`` on other machines and
  ``RUN_WORKER=0`` here, on the same bucket).
- **GET /jobs/{id} reads the records**: ``runner.status`` (queue record or
  outcome, and progress) and ``handle.poll()`` (the typed result from
  the outcome record), so any API replica can answer for any job.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, ClassVar

from fastapi import FastAPI, Header, HTTPException, Request, Response, status
from pydantic import BaseModel, Field

from stepstone import InputMismatch, InvalidRunId, Job, JobContext, JobRunner

MAX_KEY_LENGTH = 200


class Item(BaseModel):
    sku: str = Field(min_length=1, max_length=64)
    quantity: int = Field(gt=0, le=1000)


class OrderRequest(BaseModel):
    customer: str = Field(min_length=1, max_length=100)
    items: list[Item] = Field(min_length=1, max_length=100)


class OrderResult(BaseModel):
    order_id: str
    total_cents: int
    reservation: str
    receipt: str


class PaymentGateway:
    """Stands in for a card processor; an application registers its real client
    as runner state, and jobs reach it with ``ctx.state(PaymentGateway)``."""

    def __init__(self) -> None:
        self.charges: list[tuple[str, int]] = []

    async def charge(self, customer: str, cents: int) -> str:
        self.charges.append((customer, cents))
        return f"rcpt-{len(self.charges):06d}"


PRICES = {"book": 1250, "pen": 199, "lamp": 4900}
DEFAULT_PRICE = 999


class PlaceOrder(Job[OrderResult]):
    """Price, reserve stock, charge: each a memoized step, so a retry after a
    crash between the charge and the end never charges twice."""

    NAME: ClassVar[str] = "orders.place"
    request_key: str
    """The client's Idempotency-Key."""
    order: OrderRequest

    def idempotency_key(self) -> str:
        return f"orders.place:{self.request_key}"

    async def run(self, ctx: JobContext) -> OrderResult:
        async def price(order: OrderRequest) -> int:
            return sum(PRICES.get(i.sku, DEFAULT_PRICE) * i.quantity for i in order.items)

        async def reserve(order: OrderRequest) -> str:
            return f"resv-{ctx.run_id[:12]}"

        gateway = ctx.state(PaymentGateway)
        ctx.progress({"stage": "pricing", "done": 0, "of": 3})
        total = await ctx.step("price", price, self.order)
        ctx.progress({"stage": "reserving", "done": 1, "of": 3})
        reservation = await ctx.step("reserve", reserve, self.order)
        ctx.progress({"stage": "charging", "done": 2, "of": 3})
        receipt = await ctx.step("charge", gateway.charge, self.order.customer, total)
        ctx.progress({"stage": "done", "done": 3, "of": 3})
        return OrderResult(
            order_id=ctx.run_id, total_cents=total, reservation=reservation, receipt=receipt
        )


def make_runner(
    store: str | None = None, *, payments: PaymentGateway | None = None, **options: Any
) -> JobRunner:
    """The runner the API submits with, and ``stepstone worker`` runs:
    ``stepstone worker examples.api_server:make_runner``."""
    url = store or os.environ.get("STEPSTONE_STORE", "./orders-store")
    return JobRunner(url, jobs=[PlaceOrder], state=[payments or PaymentGateway()], **options)


def create_app(runner: JobRunner | None = None, *, run_worker: bool | None = None) -> FastAPI:
    """The app, on ``runner`` (default :func:`make_runner`). With ``run_worker``
    (default: the ``RUN_WORKER`` environment variable, else yes) the app runs
    the worker too, for as long as it runs."""
    the_runner = runner or make_runner()
    if run_worker is None:
        run_worker = os.environ.get("RUN_WORKER", "1") != "0"

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if run_worker:
            async with the_runner:  # leaving drains in-flight jobs
                yield
        else:
            await the_runner.open()  # so the first submit pays no client setup
            yield

    app = FastAPI(title="stepstone orders", lifespan=lifespan)
    app.state.runner = the_runner

    @app.post("/orders", status_code=status.HTTP_202_ACCEPTED)
    async def place_order(
        order: OrderRequest,
        request: Request,
        response: Response,
        idempotency_key: Annotated[str | None, Header()] = None,
    ) -> dict[str, Any]:
        if not idempotency_key or len(idempotency_key) > MAX_KEY_LENGTH:
            raise HTTPException(
                status.HTTP_400_BAD_REQUEST,
                f"send an Idempotency-Key header of 1 to {MAX_KEY_LENGTH} characters",
            )
        job = PlaceOrder(request_key=idempotency_key, order=order)
        try:
            handle = await the_runner.submit(job)
        except InputMismatch:
            raise HTTPException(
                status.HTTP_409_CONFLICT,
                "this Idempotency-Key was already used for a different request",
            ) from None
        url = str(request.url_for("get_job", run_id=handle.id))
        response.headers["Location"] = url
        return {"run_id": handle.id, "newly_submitted": handle.newly_submitted, "status_url": url}

    @app.get("/jobs/{run_id}")
    async def get_job(run_id: str) -> dict[str, Any]:
        try:
            state = await the_runner.status(run_id)  # (checks the id before reading)
        except InvalidRunId:
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no such job") from None
        if state is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no such job")
        body: dict[str, Any] = {
            "run_id": run_id,
            "status": state.status,
            "attempts": state.attempts,
            "progress": state.progress,
            "result": None,
            "error": None,
        }
        if state.finished:
            outcome = await the_runner.handle(run_id, PlaceOrder).poll()
            if outcome is not None and outcome.ok and outcome.result is not None:
                body["result"] = outcome.result.model_dump()
            elif outcome is not None and outcome.error is not None:
                body["error"] = {"reason": outcome.error.reason, "message": outcome.error.message}
        return body

    return app


def __getattr__(name: str) -> Any:
    # ``uvicorn examples.api_server:app`` builds the app on first access, so
    # importing this module (tests, ``stepstone worker``) opens no store.
    if name == "app":
        return create_app()
    raise AttributeError(name)
