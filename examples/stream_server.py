"""A run's stream to a browser, as server-sent events: an LLM-style answer
shown token by token while a stepstone job writes it.

    pip install -e '.[examples]' uvicorn
    mkdir -p answers-store && STEPSTONE_STORE=./answers-store uvicorn examples.stream_server:app
    open http://localhost:8000/

Why it is shaped this way:

- **The job writes, the page reads, the store is between them.** The job
  (:class:`Answer`) writes each token with ``ctx.stream("tokens").write``;
  ``GET /runs/{id}/tokens`` reads ``runner.stream(id, "tokens")`` and sends
  each item as an SSE event. Any API replica can serve any run's stream:
  nothing but the store is shared, and the worker may run elsewhere
  (``stepstone worker examples.stream_server:make_runner``, ``RUN_WORKER=0``
  here).
- **The event id is the item's offset**, so a browser that loses its
  connection reconnects with ``Last-Event-ID`` and goes on from the next
  item: nothing twice, nothing skipped (``EventSource`` does this itself).
- **A retried run does not repeat itself.** The tokens come from a step (a
  model call is the expensive, non-repeatable part), and each write is
  recorded in the run's history: a worker that dies half way and the retry
  that replays the run write no token twice, so the page shows the answer
  once whatever happened.
- **The stream ends when the run closes it** (or the run ends): the server
  sends ``event: end`` and the page closes its ``EventSource``.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, ClassVar

from fastapi import FastAPI, Header, HTTPException
from fastapi.responses import HTMLResponse, StreamingResponse
from pydantic import BaseModel, Field

from stepstone import InvalidRunId, Job, JobContext, JobRunner, RunNotFound


class Question(BaseModel):
    text: str = Field(min_length=1, max_length=500)


class Answer(Job[str]):
    """Asks the "model" once (a step: replayed, never asked twice) and hands
    its answer out token by token, as a model streams its output."""

    NAME: ClassVar[str] = "answers.answer"
    question: str
    delay: float = 0.05
    """Seconds between two tokens (a model's pace)."""

    async def run(self, ctx: JobContext) -> str:
        tokens = await ctx.step("think", think, self.question)
        out = ctx.stream("tokens", str)
        for token in tokens:
            await out.write(token)
            await asyncio.sleep(self.delay)
        await out.close()
        return "".join(tokens)


async def think(question: str) -> list[str]:
    """Stands in for a model's completion, already cut into tokens."""
    words = f"You asked: {question}. Here is a considered answer, one token at a time.".split()
    return [word + " " for word in words]


def make_runner(store: str | None = None, **options: Any) -> JobRunner:
    """The runner the app submits and reads with, and ``stepstone worker`` runs."""
    url = store or os.environ.get("STEPSTONE_STORE", "./answers-store")
    return JobRunner(url, jobs=[Answer], **options)


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Ask</title></head>
<body>
<form id="ask"><input id="question" name="text" required><button>Ask</button></form>
<p id="answer"></p>
<p id="status"></p>
<script>
window.received = 0;
document.getElementById("ask").addEventListener("submit", async (event) => {
  event.preventDefault();
  const answer = document.getElementById("answer");
  const status = document.getElementById("status");
  answer.textContent = "";
  status.textContent = "asking";
  const asked = await fetch("/questions", {
    method: "POST",
    headers: {"content-type": "application/json"},
    body: JSON.stringify({text: document.getElementById("question").value}),
  });
  const {run_id} = await asked.json();
  const source = new EventSource(`/runs/${run_id}/tokens`);
  source.onmessage = (message) => {
    window.received += 1;
    answer.textContent += JSON.parse(message.data);
    status.textContent = "answering";
  };
  source.addEventListener("end", () => {
    source.close();
    status.textContent = "done";
  });
});
</script>
</body></html>
"""


def create_app(runner: JobRunner | None = None, *, run_worker: bool | None = None) -> FastAPI:
    """The app, on ``runner`` (default :func:`make_runner`); with ``run_worker``
    (default: ``RUN_WORKER``, else yes) it runs the worker too."""
    the_runner = runner or make_runner()
    if run_worker is None:
        run_worker = os.environ.get("RUN_WORKER", "1") != "0"

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if run_worker:
            async with the_runner:
                yield
        else:
            await the_runner.open()
            yield
            await the_runner.close()

    app = FastAPI(title="stepstone answers", lifespan=lifespan)

    @app.get("/", response_class=HTMLResponse)
    async def page() -> str:
        return PAGE

    @app.post("/questions", status_code=202)
    async def ask(question: Question) -> dict[str, str]:
        handle = await the_runner.submit(Answer(question=question.text))
        return {"run_id": handle.id}

    @app.get("/runs/{run_id}/tokens")
    async def tokens(
        run_id: str, last_event_id: Annotated[str | None, Header()] = None
    ) -> StreamingResponse:
        start = int(last_event_id) + 1 if last_event_id and last_event_id.isdigit() else 0
        try:
            reader = the_runner.stream(run_id, "tokens", str, start=start)
        except InvalidRunId:
            raise HTTPException(404, "no such run") from None

        async def events() -> AsyncIterator[str]:
            try:
                async for item in reader.items():
                    yield f"id: {item.offset}\ndata: {json.dumps(item.value)}\n\n"
            except RunNotFound:
                yield "event: missing\ndata: {}\n\n"
            yield "event: end\ndata: {}\n\n"

        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)

    return app


def __getattr__(name: str) -> Any:
    # ``uvicorn examples.stream_server:app`` builds the app on first access, so
    # importing this module (tests, ``stepstone worker``) opens no store.
    if name == "app":
        return create_app()
    raise AttributeError(name)
