"""SqliteStore beyond the shared contract: the file it keeps, its etags, its
large objects, a write lock held elsewhere, a fork, and its durability setting.

(The contract suite, the queue's, the notices' and the cross-process races run
on it with the other stores: test_store_conformance.py, test_queue_contract.py,
test_notices.py, test_local_stores_across_processes.py.)
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import stepstone.store.sqlite.database as connection
from stepstone.store import (
    AlreadyExists,
    NotFound,
    PreconditionFailed,
    SqliteStore,
    StoreConfigError,
    StoreUnavailable,
)
from stepstone.store.parts import Parts, Split, Stream
from stepstone.store.sqlite.objects import PIECE

DEADLINE = 60.0


def raw(path: Path) -> sqlite3.Connection:
    """A connection of our own, to look at the file as SQLite keeps it."""
    return sqlite3.connect(path, isolation_level=None)


async def test_the_store_is_one_file_in_wal_mode_synced_as_asked(tmp_path: Path) -> None:
    for synchronous, level in (("full", 2), ("normal", 1)):
        path = tmp_path / f"{synchronous}.db"
        store = SqliteStore(path, synchronous=synchronous)  # type: ignore[arg-type]
        await store.put("k", b"x")
        conn = store._connection()
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == level
        store._done_with(conn)
        await store.close()
        assert raw(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with pytest.raises(StoreConfigError, match="synchronous="):
        SqliteStore(tmp_path / "x.db", synchronous="off")  # type: ignore[arg-type]


async def test_an_etag_is_never_given_twice_even_to_a_key_made_again(tmp_path: Path) -> None:
    """Every write is a new row numbered past every row before it, so a swap
    holding an etag of an object since deleted and made again is refused."""
    async with SqliteStore(tmp_path / "s.db") as store:
        first = await store.put("a", b"same")
        await store.delete("a")
        again = await store.put("a", b"same")
        assert again != first
        with pytest.raises(PreconditionFailed):
            await store.put_if_match("a", b"stale writer", first)
        with pytest.raises(PreconditionFailed):
            await store.delete("a", if_match=first)
        etags = [await store.put("b", b"same") for _ in range(20)]
        assert len(set(etags)) == 20
        with pytest.raises(PreconditionFailed):
            await store.put_if_match("a", b"x", '"not an etag of this store"')


async def test_a_key_and_a_key_under_it_coexist(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "s.db") as store:
        await store.put("a", b"file")
        await store.put("a/b", b"under it")
        assert [i.key for i in await store.list()] == ["a", "a/b"]


async def test_a_large_object_is_kept_in_pieces_that_go_with_it(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    big = bytes(range(256)) * (PIECE // 256 * 3 + 7)  # three pieces and a bit
    async with SqliteStore(path) as store:
        etag = await store.put_if_absent("big", big)
        assert raw(path).execute("SELECT count(*) FROM pieces").fetchone()[0] == 4
        assert (await store.get("big")).data == big
        found = await store.get_split("big", lambda look: Split(10, PIECE * 2))
        assert (found.before, found.piece, found.after) == (
            big[:10],
            big[10 : 10 + PIECE * 2],
            big[10 + PIECE * 2 :],
        )
        # Replaced by a small object, then a large one deleted: no piece stays behind.
        small = await store.put_if_match("big", b"small now", etag)
        assert raw(path).execute("SELECT count(*) FROM pieces").fetchone()[0] == 0
        await store.put("big2", big)
        await store.delete("big2")
        assert raw(path).execute("SELECT count(*) FROM pieces").fetchone()[0] == 0
        assert (await store.get("big")).etag == small


async def test_a_stream_that_fails_part_way_undoes_its_write_alone(tmp_path: Path) -> None:
    """A value that changed since it was counted fails its write; the writes
    committed with it in the batch land, and nothing of it stays."""
    path = tmp_path / "s.db"

    def short() -> Any:
        yield b"x" * PIECE
        yield b"y" * 10  # fewer bytes than counted

    async with SqliteStore(path) as store:
        await store.put("old", b"before")
        lying = Parts([Stream(PIECE * 2, short)])
        results = await asyncio.gather(
            store.put_parts("old", lying),
            store.put_if_absent("beside/1", b"1"),
            store.put_if_absent("beside/2", b"2"),
            return_exceptions=True,
        )
        assert isinstance(results[0], ValueError), results
        assert all(isinstance(r, str) for r in results[1:]), results
        assert (await store.get("old")).data == b"before"
        assert raw(path).execute("SELECT count(*) FROM pieces").fetchone()[0] == 0
        assert [i.key for i in await store.list("beside/")] == ["beside/1", "beside/2"]


async def test_a_write_lock_held_elsewhere_fails_writes_in_bounded_time_and_spares_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holds the write lock (a transaction left open): reads
    go on (WAL), and so does opening the store again (a command, a worker
    starting), a write waits its bounded time and fails StoreUnavailable
    saying why, and once the lock is free writes go through again."""
    monkeypatch.setattr(connection, "LOCK_WAIT", 0.5)
    path = tmp_path / "s.db"
    async with SqliteStore(path) as store:
        await store.put("k", b"committed")
        holder = raw(path)
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("INSERT INTO objects (key, size, modified, data) VALUES ('x', 0, 0, x'')")
        try:
            assert (await store.get("k")).data == b"committed"
            async with SqliteStore(path) as opened:  # (waits for no writer: it would fail)
                assert (await opened.get("k")).data == b"committed"
            async with asyncio.timeout(60):  # (bounded: it fails, it does not wait for good)
                with pytest.raises(StoreUnavailable, match="write lock"):
                    await store.put("k", b"blocked")
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        await store.put("k", b"after")
        assert (await store.get("k")).data == b"after"
        with pytest.raises(NotFound):
            await store.get("x")
        with pytest.raises(AlreadyExists):
            await store.put_if_absent("k", b"again")


async def test_store_works_after_close_from_a_new_loop(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    await store.put("k", b"1")
    await store.close()

    def other_loop() -> bytes:
        return asyncio.run(store.get("k")).data

    assert await asyncio.to_thread(other_loop) == b"1"
    await store.close()


def _child_after_fork(store: SqliteStore, results: Any) -> None:
    async def main() -> bytes:
        await store.put("from-child", b"child")
        return (await store.get("from-parent")).data

    results.put(asyncio.run(main()))


async def test_a_store_used_before_a_fork_works_in_the_child(tmp_path: Path) -> None:
    """A preloading server (gunicorn --preload) forks after the store was
    used: the child opens connections of its own, and waits on no thread of
    its parent's."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    store = SqliteStore(tmp_path / "s.db")
    await store.put("from-parent", b"parent")  # the pool, its threads, a connection
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    child = ctx.Process(target=_child_after_fork, args=(store, results))
    child.start()
    try:
        assert results.get(timeout=DEADLINE) == b"parent"
    finally:
        child.join(DEADLINE)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
    assert (await store.get("from-child")).data == b"child"
    await store.close()
