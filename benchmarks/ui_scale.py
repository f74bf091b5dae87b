"""The web view on a big directory store: how long each page takes, and how
many records it reads, with 100,000 finished runs and 5,000 live ones.

The store is seeded, not run: each record is one the engine would write
(outcome records, queue records with their envelopes, memos, attempt
records, children), encoded by the engine's own encoders and placed where
the FileStore keeps that key, with the file's time set to when the engine
would have written it. So 105,000 runs take seconds to make, not hours. The
store lives in a fresh directory, deleted at the end.

Each page is asked for through the view's ASGI application, in this process,
over a runner whose store counts its requests: first cold (a view just
started), then again as its refresh asks (what the page costs while an
operator watches). ::

    python -m benchmarks.ui_scale --finished 100000 --live 5000 --rounds 3 \\
        --out benchmarks/results/<commit>-ui-scale.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.counting import CountingStore
from stepstone import JobRunner
from stepstone.records import attempts as attempt_records
from stepstone.records.attempts import AttemptInfo, AttemptResult
from stepstone.records.calls import Call, PositionedMemo
from stepstone.records.codec import pack
from stepstone.records.envelope import Envelope, input_hash
from stepstone.records.layout import (
    Layout,
    fresh_incarnation,
    fresh_run_id,
    position_key,
    run_id_for_key,
)
from stepstone.records.outcome import ErrorInfo, OutcomeRecord
from stepstone.runtime.decision import FailureKind
from stepstone.runtime.status import JobStatus
from stepstone.runtime.store_queue.records import StoredJob
from stepstone.runtime.store_queue.records import encode as encode_job
from stepstone.store.file import FileStore

KINDS = (
    ("orders.charge", 0.6),
    ("mail.send", 0.3),
    ("reports.build", 0.099),
    ("audit.rare", 0.001),
)
"""Job kinds and their shares: ``audit.rare`` is the filter that matches
almost nothing (a hundred runs in 100,000)."""
FINISHED_SPREAD = 48 * 3600.0
"""Finished runs ended evenly over the last two days."""


@dataclass
class Seeded:
    """What the pages are asked about: a few runs of each sort."""

    root: Path
    now: float
    finished: list[str] = field(default_factory=list)
    keyed: list[tuple[str, str]] = field(default_factory=list)
    """(run id, its key) of some finished keyed runs."""
    live: dict[str, list[str]] = field(default_factory=dict)
    """Queue status: some run ids."""
    parent: str = ""
    """A finished run with children."""


class _Writer:
    """Files where a FileStore keeps keys, each with the time its writer set."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._made: set[str] = set()

    def put(self, key: str, data: bytes, at: float) -> None:
        path = os.path.join(self.root, key)
        directory = os.path.dirname(path)
        if directory not in self._made:
            os.makedirs(directory, exist_ok=True)
            self._made.add(directory)
        with open(path, "wb") as out:
            out.write(data)
        os.utime(path, ns=(int(at * 1e9), int(at * 1e9)))


def _kind(rng: random.Random) -> str:
    pick = rng.random()
    for kind, share in KINDS:
        if pick < share:
            return kind
        pick -= share
    return KINDS[0][0]


def seed(
    root: Path,
    *,
    finished: int,
    live: int,
    now: float,
    rng: random.Random,
    spread: float = FINISHED_SPREAD,
) -> Seeded:
    """Write ``finished`` runs that ended evenly over the ``spread`` seconds
    before ``now`` and ``live`` queued ones under ``root``."""
    layout = Layout()
    writer = _Writer(root)
    seeded = Seeded(root, now)
    for n in range(finished):
        kind = _kind(rng)
        keyed = n % 2 == 0
        key = f"order-{n}" if keyed else None
        run_id = run_id_for_key(key) if key is not None else fresh_run_id()
        incarnation = fresh_incarnation()
        ended = now - rng.random() * spread
        started = ended - rng.uniform(0.05, 3.0)
        submitted = started - rng.uniform(0.0, 2.0)
        roll = rng.random()
        status = (
            JobStatus.FAILED
            if roll < 0.04
            else JobStatus.CANCELLED
            if roll < 0.05
            else JobStatus.SUCCEEDED
        )
        payload = json.dumps({"order": n, "cents": 500 + n % 1000}).encode()
        error = (
            ErrorInfo(FailureKind.EXHAUSTED, "ValueError: card declined", "ValueError")
            if status is JobStatus.FAILED
            else None
        )
        record = OutcomeRecord(
            run_id=run_id,
            kind=kind,
            status=status,
            input_hash=input_hash(kind, payload),
            incarnation=incarnation,
            attempts=3 if error is not None else 1,
            finished_at=ended,
            result=pack(f"receipt-{n}") if status is JobStatus.SUCCEEDED else None,
            error=error,
            submitted_at=submitted,
            started_at=started,
            claims=3 if error is not None else 1,
            claimed_at=started,
            worker=("host-1", 4242, "host-1"),
            version="v2" if n % 5 else "v1",
            key=key,
            input=payload,
            input_size=len(payload),
        )
        writer.put(layout.outcome(run_id), record.encode(), ended)
        memo = PositionedMemo(1, Call("step", "quote"), pack({"cents": 500}))
        writer.put(layout.memo(run_id, incarnation, position_key(1)), memo.encode(), started)
        if error is not None:
            for claim in (1, 2):
                attempt = AttemptInfo(
                    claim, claim, AttemptResult.FAILED, started - 10 * claim, started - 9 * claim,
                    "host-1", "host-1", 4242, "ValueError", "ValueError: card declined",
                )  # fmt: skip
                at = started - 9 * claim
                writer.put(
                    layout.attempt(run_id, incarnation, claim), attempt_records.encode(attempt), at
                )
        if n < 50:
            seeded.finished.append(run_id)
            if key is not None:
                seeded.keyed.append((run_id, key))
    # One finished parent with five children among the finished runs.
    seeded.parent = seeded.finished[1]
    for child in seeded.finished[2:7]:
        writer.put(layout.child(seeded.parent, child), b"", now - 3600)
    shares = (
        (JobStatus.READY, 0.4),
        (JobStatus.SCHEDULED, 0.2),
        (JobStatus.RUNNING, 0.2),
        (JobStatus.SLEEPING, 0.2),
    )
    n = 0
    for status, share in shares:
        ids = seeded.live.setdefault(status.value, [])
        for _ in range(round(live * share)):
            n += 1
            ids.append(_queued(writer, status, n, now, rng))
    # Dead runs keep their queue record beside a failed outcome.
    dead = seeded.live.setdefault(JobStatus.DEAD.value, [])
    for _ in range(max(1, live // 50)):
        n += 1
        dead.append(_queued(writer, JobStatus.DEAD, n, now, rng))
    return seeded


def _queued(writer: _Writer, status: JobStatus, n: int, now: float, rng: random.Random) -> str:
    kind = _kind(rng)
    run_id = fresh_run_id()
    payload = json.dumps({"order": f"live-{n}"}).encode()
    envelope = Envelope(kind, payload, fresh_incarnation(), input_hash(kind, payload), False)
    created = now - rng.uniform(0, 3600)
    job = StoredJob(
        id=run_id,
        kind=kind,
        payload=envelope.encode(),
        priority=5,
        max_attempts=3,
        run_at=created,
        created_at=created,
        updated_at=created,
        nonce=fresh_run_id(),
    )
    updated = created
    if status is JobStatus.SCHEDULED:
        job.run_at = now + rng.uniform(600, 86400)
    elif status is JobStatus.RUNNING:
        updated = now - rng.uniform(0, 3)
        job = job.claimed(updated, token=fresh_run_id(), lease_expires_at=now + 3600)
    elif status is JobStatus.SLEEPING:
        updated = created + 1
        job = job.next(updated, run_at=now + 3600, wait=("sleeping", "until later"), attempts=1)
    elif status is JobStatus.DEAD:
        updated = created + 5
        job = job.next(updated, dead=True, attempts=3, dead_reason="exhausted: card declined")
        layout = Layout()
        record = OutcomeRecord(
            run_id=run_id, kind=kind, status=JobStatus.FAILED, input_hash=envelope.input_hash,
            incarnation=envelope.incarnation, attempts=3, finished_at=updated,
            error=ErrorInfo(FailureKind.EXHAUSTED, "ValueError: card declined", "ValueError"),
            submitted_at=created,
        )  # fmt: skip
        writer.put(layout.outcome(run_id), record.encode(), updated)
    writer.put(f"queue/jobs/{run_id}", encode_job(job), updated)
    return run_id


# -- asking the view for a page --------------------------------------------------------


async def ask(app: Any, path: str) -> tuple[int, bytes]:
    """GET ``path`` from the ASGI application ``app``: its status and body."""
    target, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": target,
        "raw_path": target.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
    }
    status = 0
    body = bytearray()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            body.extend(message.get("body", b""))

    await app(scope, receive, send)
    return status, bytes(body)


def pages(seeded: Seeded) -> Iterator[tuple[str, str]]:
    """(name, path) of every page measured."""
    yield "runs", "/"
    for status in JobStatus:
        yield f"runs state={status.value}", f"/?state={status.value}"
    yield "runs kind=orders.charge", "/?kind=orders.charge"
    yield "runs kind=audit.rare", "/?kind=audit.rare"
    yield "runs since=1h", "/?since=1h"
    yield "runs version=v1", "/?version=v1"
    _, key = seeded.keyed[0]
    yield "search full id", f"/?q={seeded.finished[0]}"
    yield "search id prefix", f"/?q={seeded.finished[0][:8]}"
    yield "search key", f"/?q={key}"
    yield "search key prefix", "/?q=order-4443"  # (no key: those of order-44430...)
    yield "run finished", f"/runs/{seeded.finished[0]}"
    yield "run failed parent", f"/runs/{seeded.parent}"
    yield "run running", f"/runs/{seeded.live[JobStatus.RUNNING.value][0]}"
    yield "run dead", f"/runs/{seeded.live[JobStatus.DEAD.value][0]}"
    yield "throughput", "/throughput"
    yield "workers", "/workers"
    yield "schedules", "/schedules"


@dataclass
class Measured:
    ms: float
    reads: dict[str, int]
    status: int
    partial: bool = False
    """The page said it had not read every queue record yet."""


async def measure(seeded: Seeded, refresh_rounds: int) -> dict[str, dict[str, list[Measured]]]:
    """Each page from a view just started (its listing of finished runs begun
    at its start, as ``stepstone ui`` begins it), up to three times a second
    apart while that listing is under way, then ``refresh_rounds`` times
    again once it is done, as the page's refresh asks; a page that said it
    had not read every queue record, again until it has."""
    from stepstone.ui.app import create_app

    out: dict[str, dict[str, list[Measured]]] = {}
    for name, path in pages(seeded):
        store = CountingStore(FileStore(seeded.root))
        runner = JobRunner(store)
        try:
            app = create_app(runner, refresh=2.0, hosts=["testserver"])
            found: dict[str, list[Measured]] = {"cold": [], "refresh": [], "listing": []}
            start = time.perf_counter()
            app.state.finished.start()
            found["cold"].append(await _timed(app, store, path))
            # Refreshes a second apart while that listing is under way (it
            # pauses while a page is served).
            found["during"] = []
            while app.state.finished.listed is None and len(found["during"]) < 3:
                await asyncio.sleep(1.0)
                found["during"].append(await _timed(app, store, path))
            while await app.state.finished.latest(wait=0.05) is None:
                pass
            listed = (time.perf_counter() - start) * 1000
            found["listing"].append(Measured(listed, {}, 0))
            for _ in range(refresh_rounds):
                found["refresh"].append(await _timed(app, store, path))
            if found["cold"][0].partial:
                # The queue's records are read a budget a refresh: until all are.
                refreshes = 1 + len(found["during"]) + len(found["refresh"])
                filling = found["refresh"][-1]
                while filling.partial and refreshes < 100:
                    filling = await _timed(app, store, path)
                    refreshes += 1
                found["filled"] = [await _timed(app, store, path)]
                found["filled"][0].reads["refreshes"] = refreshes
            if path == "/throughput":
                # Its statuses are read once each, a budget a refresh: until all are.
                filling = found["refresh"][-1]
                refreshes = len(found["refresh"])
                while filling.reads["GET"] and refreshes < 1000:
                    filling = await _timed(app, store, path)
                    refreshes += 1
                found["filled"] = [await _timed(app, store, path)]
                found["filled"][0].reads["refreshes"] = refreshes
            out[name] = found
        finally:
            await app.state.finished.close()
            await runner.close()
    return out


async def _timed(app: Any, store: CountingStore, path: str) -> Measured:
    store.reset()
    start = time.perf_counter()
    status, body = await ask(app, path)
    ms = (time.perf_counter() - start) * 1000
    return Measured(ms, store.snapshot(), status, b'class="note queue-unread"' in body)


def _load() -> str:
    try:
        done = subprocess.run(["uptime"], capture_output=True, text=True, check=False)
    except OSError:
        return ""
    return done.stdout.strip()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finished", type=int, default=100_000)
    parser.add_argument("--live", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3, help="passes over every page")
    parser.add_argument("--refreshes", type=int, default=3, help="refreshes after the cold read")
    parser.add_argument("--workdir", default=None, help="where the fresh store directories go")
    parser.add_argument("--out", default=None, help="a JSON file for the results")
    args = parser.parse_args(argv)
    rounds: list[dict[str, Any]] = []
    # One store for every round: deleting a hundred thousand runs' files
    # takes longer on ext4 than writing them, and the rounds measure the
    # view, not the seed.
    root = Path(tempfile.mkdtemp(prefix="ui-scale-", dir=args.workdir))
    try:
        start = time.perf_counter()
        seeded = seed(
            root / "store", finished=args.finished, live=args.live, now=time.time(),
            rng=random.Random(0),
        )  # fmt: skip
        seconds = time.perf_counter() - start
        print(f"seeded in {seconds:.1f} s", flush=True)
        for round_ in range(args.rounds):
            load = _load()
            print(f"round {round_ + 1}: {load}", flush=True)
            found = asyncio.run(measure(seeded, args.refreshes))
            rounds.append({"seed_s": seconds, "load": load, "pages": _plain(found)})
            _print(found)
            if args.out:  # after each round: the deletion below takes minutes
                _write(args, rounds)
    finally:
        shutil.rmtree(root)


def _write(args: argparse.Namespace, rounds: list[dict[str, Any]]) -> None:
    Path(args.out).write_text(
        json.dumps(
            {
                "commit": _commit(),
                "finished": args.finished,
                "live": args.live,
                "rounds": rounds,
                "median": _summary(rounds),
            },
            indent=1,
        )
    )


def _print(found: dict[str, dict[str, list[Measured]]]) -> None:
    for name, by in found.items():
        cold, refresh = by["cold"][0], by["refresh"]
        warm_ms = statistics.median(m.ms for m in refresh) if refresh else 0.0
        print(
            f"  {name:28} {cold.status} first {cold.ms:7.1f} ms {_short(cold.reads):24}"
            f" listed {by['listing'][0].ms:7.1f} ms"
            f" refresh {warm_ms:7.1f} ms {_short(refresh[-1].reads) if refresh else ''}",
            flush=True,
        )
        for during in by.get("during", []):
            print(f"  {name:28} during {during.ms:7.1f} ms {_short(during.reads)}", flush=True)
        if "filled" in by:
            filled = by["filled"][0]
            print(f"  {name:28} filled {filled.ms:7.1f} ms {_short(filled.reads)}", flush=True)


def _short(reads: dict[str, int]) -> str:
    return " ".join(f"{kind} {n}" for kind, n in reads.items() if n)


def _plain(found: dict[str, dict[str, list[Measured]]]) -> dict[str, Any]:
    return {
        name: {
            phase: [
                {"ms": m.ms, "reads": m.reads, "status": m.status, "partial": m.partial}
                for m in measured
            ]
            for phase, measured in by.items()
        }
        for name, by in found.items()
    }


def _summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per page and phase: the median ms over every round, and the reads of the last."""
    out: dict[str, Any] = {}
    if not rounds:
        return out
    for name in rounds[0]["pages"]:
        out[name] = {}
        for phase in ("cold", "during", "listing", "refresh", "filled"):
            measured = [m for r in rounds for m in r["pages"][name].get(phase, [])]
            if measured:
                out[name][phase] = {
                    "ms": round(statistics.median(m["ms"] for m in measured), 1),
                    "reads": measured[-1]["reads"],
                }
    return out


def _commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip()


if __name__ == "__main__":
    main()
