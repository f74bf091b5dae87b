"""The local stores (a directory, a SQLite file) across real processes: the
races are real, not interleaved. Each child opens its own store on the same
directory or file; a barrier makes them start racing together instead of one
finishing before the next has imported anything."""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import time
from pathlib import Path
from typing import Any

import pytest

from stepstone.store import (
    AlreadyExists,
    FileStore,
    NotFound,
    ObjectStore,
    PreconditionFailed,
    SqliteStore,
)

pytestmark = pytest.mark.slow

PROCESSES = 4
RACES = 30
CHURN_OPS = 400
DEADLINE = 60.0


def local(where: str) -> ObjectStore:
    """The store at ``where``: a SQLite file (``.db``) or a directory, made if missing."""
    return SqliteStore(where) if where.endswith(".db") else FileStore(where)


@pytest.fixture(params=["file", "sqlite"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path / ("jobs.db" if request.param == "sqlite" else "store"))


def _child_put_if_absent(where: str, n: int, barrier: Any, results: Any) -> None:
    async def main() -> list[int]:
        async with local(where) as store:
            barrier.wait(DEADLINE)
            won = []
            for i in range(RACES):
                try:
                    await store.put_if_absent(f"race/{i:02d}", b"process-%d" % n)
                    won.append(i)
                except AlreadyExists:
                    pass
            return won

    results.put((n, asyncio.run(main())))


def _child_increment(where: str, n: int, times: int, barrier: Any, results: Any) -> None:
    async def main() -> int:
        rng = random.Random(n)
        conflicts = 0
        async with local(where) as store:
            barrier.wait(DEADLINE)
            done = 0
            while done < times:
                current = await store.get("counter")
                value = int(current.data)
                try:
                    await store.put_if_match("counter", b"%d" % (value + 1), current.etag)
                except PreconditionFailed:
                    conflicts += 1
                    await asyncio.sleep(rng.random() * 0.002)
                    continue
                done += 1
        return conflicts

    results.put((n, asyncio.run(main())))


def _named(key: str, pad: int) -> bytes:
    """A value that says which key it belongs to and how long it is."""
    size = len(key) + 8 + pad
    return f"{key}|{size:06d}|".encode() + b"x" * pad


def _is_named(key: str, data: bytes) -> bool:
    head = f"{key}|".encode()
    size = data[len(head) : len(head) + 6]
    return data.startswith(head) and size.isdigit() and int(size) == len(data)


def _child_churn(where: str, n: int, barrier: Any, results: Any) -> None:
    """Writes, replaces, deletes and reads a few keys at random; every value
    names its key, so a read that returned another object's bytes shows."""

    async def main() -> list[str]:
        rng = random.Random(n)
        wrong: list[str] = []
        async with local(where) as store:
            barrier.wait(DEADLINE)
            for _ in range(CHURN_OPS):
                key = f"churn/k{rng.randrange(6)}"
                roll = rng.random()
                if roll < 0.4:
                    await store.put(key, _named(key, rng.randrange(200)))
                elif roll < 0.6:
                    await store.delete(key)
                else:
                    reads = await asyncio.gather(
                        *(store.get(key) for _ in range(3)), return_exceptions=True
                    )
                    for got in reads:
                        if isinstance(got, NotFound):
                            continue
                        if isinstance(got, BaseException):
                            raise got
                        if not _is_named(key, got.data):
                            wrong.append(f"{key} read {got.data[:40]!r}, {len(got.data)} bytes")
        return wrong

    results.put((n, asyncio.run(main())))


def _run_children(target: Any, args: list[tuple[Any, ...]]) -> dict[int, Any]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(args))
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, barrier, results)) for a in args]
    for p in procs:
        p.start()
    out: dict[int, Any] = {}
    deadline = time.monotonic() + DEADLINE
    try:
        for _ in procs:
            n, value = results.get(timeout=max(0.1, deadline - time.monotonic()))
            out[n] = value
    finally:
        for p in procs:
            p.join(max(0.1, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs)
    return out


async def test_put_if_absent_across_processes_has_one_winner_per_key(where: str) -> None:
    await local(where).close()
    won = _run_children(_child_put_if_absent, [(where, n) for n in range(PROCESSES)])
    # Every key was won exactly once, and holds the winner's bytes.
    winners = {i: n for n, keys in won.items() for i in keys}
    assert sorted(i for keys in won.values() for i in keys) == list(range(RACES))
    async with local(where) as store:
        page = await store.list("race/")
        assert [i.key for i in page] == [f"race/{i:02d}" for i in range(RACES)]
        for i in range(RACES):
            assert (await store.get(f"race/{i:02d}")).data == b"process-%d" % winners[i]


async def test_cas_increments_across_processes_lose_no_update(where: str) -> None:
    times = 40
    async with local(where) as store:
        await store.put("counter", b"0")
    conflicts = _run_children(_child_increment, [(where, n, times) for n in range(PROCESSES)])
    async with local(where) as store:
        assert (await store.get("counter")).data == b"%d" % (PROCESSES * times)
    assert sum(conflicts.values()) > 0  # the processes really raced


async def test_reads_across_processes_return_only_the_keys_own_bytes(where: str) -> None:
    """Four processes replace and delete a few keys while reading them (a
    FileStore's replaced inodes freed and taken again, a SQLite file's rows
    and pages): every read returns bytes written to the key read, or NotFound."""
    await local(where).close()
    wrong = _run_children(_child_churn, [(where, n) for n in range(PROCESSES)])
    assert {n: w for n, w in wrong.items() if w} == {}
