"""The W3 workload on two peers, so stepstone is measured beside them in one run.

W3 here is the peers' own benchmark shape: N jobs of three steps, 64 at a
time, **each submit awaited before the next** (a loop over a list, an API
handler under light load), then every result awaited. The clock runs from
the first submit to the last result; each submit's own time is recorded too.

- **huey** (``SqliteHuey``, WAL, ``synchronous=FULL``: an enqueue returns
  once it is in the write-ahead log on disk): one in-process consumer with 64
  worker threads, polling every 50 ms at most when idle. huey keeps no step
  records: a job's three steps are three plain calls.
- **DBOS** (SQLite system database in WAL mode; a queue with concurrency 64
  polled every 50 ms; results polled every 50 ms): each step a
  ``@DBOS.step``, recorded as DBOS records steps.

Both are optional (``pip install huey dbos``, or the ``bench`` extra); each
case runs in its own interpreter (benchmarks/run.py), which matters for DBOS:
it is a process-wide singleton.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
from collections.abc import Callable
from typing import Any

POLL_SECONDS = 0.05


def _bump(x: int) -> int:
    return x + 1


def _one_at_a_time(
    submit: Callable[[int], Any], result: Callable[[Any], int], n: int, steps: int
) -> dict[str, Any]:
    """Submit jobs 0..n-1 one after another, then wait for every result; the
    figures ``benchmarks.cases`` reports (seconds from the first submit to
    the last result, the submits' seconds, each submit's seconds, and the
    CPU seconds of the process, every thread, meanwhile)."""
    handles, latencies = [], []
    cpu = time.process_time()
    t0 = time.perf_counter()
    for i in range(n):
        start = time.perf_counter()
        handles.append(submit(i))
        latencies.append(time.perf_counter() - start)
    submit_seconds = time.perf_counter() - t0
    results = [result(handle) for handle in handles]
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - cpu
    assert results == [i + steps for i in range(n)], "wrong results"
    return {
        "seconds": seconds,
        "submit_seconds": submit_seconds,
        "latencies": latencies,
        "cpu_seconds": cpu,
    }


def huey_w3(n: int, steps: int, concurrency: int, workdir: str) -> dict[str, Any]:
    from huey import SqliteHuey

    root = tempfile.mkdtemp(prefix="stepstone-bench-huey-", dir=workdir or None)
    huey = SqliteHuey("bench", filename=os.path.join(root, "huey.db"), fsync=True)

    @huey.task()
    def w3(x: int) -> int:
        for _ in range(steps):
            x = _bump(x)
        return x

    consumer = huey.create_consumer(
        workers=concurrency,
        worker_type="thread",
        periodic=False,
        initial_delay=POLL_SECONDS,
        backoff=1.0,
        max_delay=POLL_SECONDS,
        check_worker_health=False,
    )
    consumer.start()  # worker threads (and signal handlers: this is the main thread)
    try:
        warm = [w3(-1 - i) for i in range(min(concurrency, n))]
        for result in warm:
            result.get(blocking=True, timeout=60)
        figures = _one_at_a_time(
            w3,
            lambda h: h.get(blocking=True, timeout=120, backoff=1.0, max_delay=POLL_SECONDS),
            n,
            steps,
        )
    finally:
        consumer.stop(graceful=True)
    return {"root": root, **figures}


def _wal(path: str) -> None:
    """Create the SQLite file in WAL mode (the mode is kept in the file)."""
    with sqlite3.connect(path) as conn:
        conn.execute("pragma journal_mode=wal")


def dbos_w3(n: int, steps: int, concurrency: int, workdir: str) -> dict[str, Any]:
    from dbos import DBOS

    root = tempfile.mkdtemp(prefix="stepstone-bench-dbos-", dir=workdir or None)
    db = os.path.join(root, "dbos.sqlite")
    _wal(db)
    DBOS(
        config={
            "name": "bench",
            "system_database_url": f"sqlite:///{db}",
            "notification_listener_polling_interval_sec": POLL_SECONDS,
            "run_admin_server": False,
        }
    )

    @DBOS.step()
    def bump(x: int) -> int:
        return _bump(x)

    @DBOS.workflow()
    def w3(x: int) -> int:
        for _ in range(steps):
            x = bump(x)
        return x

    DBOS.launch()
    queue = DBOS.register_queue(
        "w3", worker_concurrency=concurrency, polling_interval_sec=POLL_SECONDS
    )
    try:
        warm = [queue.enqueue(w3, -1 - i) for i in range(min(concurrency, n))]
        for handle in warm:
            handle.get_result(polling_interval_sec=POLL_SECONDS)
        figures = _one_at_a_time(
            lambda i: queue.enqueue(w3, i),
            lambda h: h.get_result(polling_interval_sec=POLL_SECONDS),
            n,
            steps,
        )
    finally:
        DBOS.destroy()
    return {"root": root, **figures}


PEERS = {"huey": huey_w3, "dbos": dbos_w3}
