"""What sealing errors' texts costs (``JobRunner(seal_errors=True)``), and
that a run that succeeds does none of it.

    python -m benchmarks.sealed_errors [--rounds 3] [--runs 200] [--out FILE]

**Texts.** CPU per seal and per open of the texts a failed attempt writes
(``ErrorSealing.seal``, ``open_text``): a message of 80 characters, a queue
record's last error (4,000: message and the traceback's end) and a
traceback (8,000), under aes-gcm and zstd+aes-gcm; the best of ``--rounds``.

**End to end.** ``--runs`` runs of a job that fails twice (``max_attempts=2``:
a retry, then its end), on a fresh directory store with an aes-gcm codec,
``seal_errors`` off and on, interleaved ``--rounds`` times: the process's
CPU seconds per failed attempt. Then ``--runs`` runs that succeed, off
and on: CPU per run, and how many times any sealing or opening function
ran during them (0 is the promise: a run that succeeds does the same work
either way). Log lines are off (the ``stepstone`` loggers at ERROR): a
failure logs the same lines with the option or without.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import shutil
import statistics
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, ClassVar

from stepstone import AesGcmCodec, Job, JobContext, JobFailed, JobRunner, ZstdCodec
from stepstone.execute import ending
from stepstone.handles import state
from stepstone.records import error_texts, history, outcome
from stepstone.records.payloads import PayloadCodec, Payloads
from stepstone.runtime.worker import settle

KEY = base64.b64encode(os.urandom(32)).decode()
CHAINS: dict[str, Callable[[], list[PayloadCodec]]] = {
    "aes-gcm": lambda: [AesGcmCodec({"k1": KEY})],
    "zstd+aes-gcm": lambda: [ZstdCodec(), AesGcmCodec({"k1": KEY})],
}


def _texts() -> dict[str, str]:
    try:
        raise ValueError("card 4111-1111-1111-1111 declined for alice@example.com (code 51)")
    except ValueError as exc:
        trace = "".join(traceback.format_exception(exc))
    message = "ValueError: card 4111-1111-1111-1111 declined for alice@example.com"
    frames = (trace * 100)[:8000]
    return {"message 80": message[:80], "last error 4000": frames[:4000], "traceback 8000": frames}


def measure_texts(rounds: int, loops: int = 2000) -> list[dict[str, Any]]:
    rows = []
    for chain, make in CHAINS.items():
        payloads = Payloads(make())
        sealing = error_texts.ErrorSealing(payloads, on=True)
        for name, text in _texts().items():
            sealed = sealing.seal(text)
            seal_best = open_best = float("inf")
            for _ in range(rounds):
                start = time.process_time()
                for _ in range(loops):
                    sealing.seal(text)
                seal_best = min(seal_best, (time.process_time() - start) / loops)
                start = time.process_time()
                for _ in range(loops):
                    error_texts.open_text(payloads, sealed)
                open_best = min(open_best, (time.process_time() - start) / loops)
            rows.append(
                {
                    "chain": chain,
                    "text": name,
                    "sealed_chars": len(sealed),
                    "seal_us": seal_best * 1e6,
                    "open_us": open_best * 1e6,
                }
            )
    return rows


class Fails(Job[str]):
    NAME: ClassVar[str] = "bench.fails"
    card: str

    async def run(self, ctx: JobContext) -> str:
        raise ValueError(f"card {self.card} declined")


class Succeeds(Job[str]):
    NAME: ClassVar[str] = "bench.succeeds"
    card: str

    async def run(self, ctx: JobContext) -> str:
        return await ctx.step("charge", _charge, self.card)


async def _charge(card: str) -> str:
    return f"charged {card}"


_WATCHED: list[tuple[Any, str]] = [
    (error_texts.ErrorSealing, "seal"),
    (error_texts, "open_text"),
    (error_texts, "open_optional"),
    (error_texts, "opened_job"),
    (outcome, "opened_error"),
    (outcome, "open_text"),
    (outcome, "open_optional"),
    (ending.RunEnding, "_sealed"),
    (settle, "kept"),
    (history, "open_optional"),
    (state, "open_text"),
    (state, "open_optional"),
]
"""What sealing and opening error texts runs through (where each is looked up)."""


@contextmanager
def counted() -> Iterator[Counter[str]]:
    """Count the calls of every sealing and opening function while inside."""
    calls: Counter[str] = Counter()
    saved = []
    for owner, name in _WATCHED:
        original = getattr(owner, name)

        def wrapper(*args: Any, _o: Any = original, _n: str = name, **kwargs: Any) -> Any:
            calls[_n] += 1
            return _o(*args, **kwargs)

        saved.append((owner, name, original))
        setattr(owner, name, wrapper)
    try:
        yield calls
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


async def one_run(job: str, runs: int, seal: bool) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="bench-sealed-errors-"))
    try:
        runner = JobRunner(
            str(root),
            jobs=[Fails, Succeeds],
            codec=[AesGcmCodec({"k1": KEY})],
            seal_errors=seal,
            max_attempts=2,
            retry_backoff=0.0,
            concurrency=32,
            poll_interval=0.05,
        )
        with counted() as calls:
            async with runner:
                cpu, wall = time.process_time(), time.perf_counter()
                kind = Fails if job == "fails" else Succeeds
                handles = [await runner.submit(kind(card=f"4111-{n}")) for n in range(runs)]
                for handle in handles:
                    with suppress(JobFailed):
                        await handle.result(timeout=120)
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        attempts = runs * (2 if job == "fails" else 1)
        return {
            "cpu_ms_per_attempt": cpu * 1e3 / attempts,
            "wall_s": wall,
            "sealing_calls": sum(calls.values()),
            "calls": dict(calls),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def measure_runs(runs: int, rounds: int) -> list[dict[str, Any]]:
    rows = []
    for n in range(rounds):
        for job in ("fails", "succeeds"):
            for seal in (False, True):
                row = await one_run(job, runs, seal)
                rows.append({"job": job, "seal_errors": seal, "round": n, **row})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args()
    logging.getLogger("stepstone").setLevel(logging.ERROR)  # (each failure logs alike either way)
    texts = measure_texts(args.rounds)
    print(f"{'chain':14} {'text':16} {'sealed chars':>12} {'seal us':>8} {'open us':>8}")
    for row in texts:
        print(
            f"{row['chain']:14} {row['text']:16} {row['sealed_chars']:12} "
            f"{row['seal_us']:8.1f} {row['open_us']:8.1f}"
        )
    runs = asyncio.run(measure_runs(args.runs, args.rounds)) if args.runs else []
    for job in ("fails", "succeeds"):
        for seal in (False, True):
            mine = [r for r in runs if r["job"] == job and r["seal_errors"] is seal]
            if not mine:
                continue
            cpu = sorted(round(r["cpu_ms_per_attempt"], 2) for r in mine)
            print(
                f"{job:9} seal_errors={seal!s:5}: CPU per attempt {statistics.median(cpu)} ms "
                f"(rounds {cpu}); sealing/opening calls {[r['sealing_calls'] for r in mine]}"
            )
    if args.out:
        Path(args.out).write_text(
            json.dumps({"texts": texts, "runs": runs, "load": os.getloadavg()}, indent=1) + "\n"
        )


if __name__ == "__main__":
    main()
