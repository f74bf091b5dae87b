"""FileStore beyond the shared contract: real processes, the root boundary, the disk layout."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest

from stepstone.store import (
    AlreadyExists,
    FileStore,
    InvalidKey,
    NotFound,
    PreconditionFailed,
    StoreConfigError,
)
from stepstone.store.file.batches import Write
from stepstone.store.file.flush import HAVE_SYNCFS
from stepstone.store.keys import RESERVED_SEGMENT

DEADLINE = 60.0


# -- the root boundary ------------------------------------------------------------------


def _snapshot(directory: Path, exclude: Path) -> set[str]:
    seen = set()
    for dirpath, dirnames, filenames in os.walk(directory):
        if Path(dirpath) == exclude:
            dirnames.clear()
            continue
        for name in dirnames + filenames:
            seen.add(os.path.join(dirpath, name))
    return seen


ESCAPES = [
    "../x",
    "a/../../x",
    "../store-sibling/x",
    "/etc/passwd",
    "/tmp/x",
    "a/../../../../../../tmp/x",
    "..\\x",
    f"{RESERVED_SEGMENT}/../../x",
]


async def test_nothing_lands_outside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = FileStore(root)
    await store.put("inside", b"ok")
    before = _snapshot(tmp_path, exclude=root)
    for key in ESCAPES:
        for call in (
            store.put(key, b"x"),
            store.put_if_absent(key, b"x"),
            store.put_if_match(key, b"x", '"0"'),
            store.delete(key),
            store.get(key),
        ):
            with pytest.raises(InvalidKey):
                await call
    assert _snapshot(tmp_path, exclude=root) == before
    assert [i.key for i in await store.list()] == ["inside"]
    await store.close()


async def test_a_symlink_out_of_the_root_is_not_written_through(tmp_path: Path) -> None:
    root = tmp_path / "store"
    outside = tmp_path / "outside"
    outside.mkdir()
    store = FileStore(root)
    (outside / "victim").write_bytes(b"keep me")
    (root / "link").symlink_to(outside, target_is_directory=True)
    for call in (
        store.put("link/x", b"x"),
        store.put_if_absent("link/new/dir/x", b"x"),  # must not even create new/dir out there
        store.delete("link/victim"),
    ):
        with pytest.raises(InvalidKey):
            await call
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]
    assert (outside / "victim").read_bytes() == b"keep me"
    assert await store.list() == []  # symlinks are not objects
    await store.close()


async def test_a_listing_begun_in_its_prefixs_directory_follows_no_symlink_nor_file(
    tmp_path: Path,
) -> None:
    """A listing starts in the deepest directory its prefix names; on the way
    there it treats a symlink or a file as the walk from the root
    would: nothing is under them."""
    root, outside = tmp_path / "store", tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "victim").write_bytes(b"x")
    store = FileStore(root)
    await store.put("runs/a/1", b"one")
    await store.put("runs/b/1", b"two")
    await store.put("plain", b"a file")
    (root / "runs" / "link").symlink_to(outside, target_is_directory=True)
    assert [i.key for i in await store.list("runs/a/")] == ["runs/a/1"]
    assert [i.key async for i in store.scan("runs/b/1")] == ["runs/b/1"]
    assert [i.key for i in await store.list("runs/")] == ["runs/a/1", "runs/b/1"]
    for prefix in ("runs/link/", "runs/link/sub/", "plain/", "plain/x"):
        assert await store.list(prefix) == [], prefix
        assert [i async for i in store.scan(prefix)] == [], prefix
    assert await store.list("runs/none/") == []
    await store.close()


@pytest.mark.parametrize("own", [RESERVED_SEGMENT, f"{RESERVED_SEGMENT}/locks"])
def test_a_store_whose_own_directory_is_a_symlink_is_refused(tmp_path: Path, own: str) -> None:
    root, outside = tmp_path / "store", tmp_path / "outside"
    outside.mkdir()
    (root / own).parent.mkdir(parents=True, exist_ok=True)
    (root / own).symlink_to(outside, target_is_directory=True)
    with pytest.raises(StoreConfigError, match="symlink"):
        FileStore(root)
    assert list(outside.iterdir()) == []


async def test_a_symlinked_lock_file_is_not_written_through(tmp_path: Path) -> None:
    root, outside = tmp_path / "store", tmp_path / "outside"
    outside.mkdir()
    store = FileStore(root)
    locks = root / RESERVED_SEGMENT / "locks"
    for stripe in range(256):  # whichever stripe the key takes
        (locks / f"{stripe:03d}.lock").symlink_to(outside / f"{stripe:03d}")
    with pytest.raises(StoreConfigError, match="symlink"):
        await store.put("k", b"x")
    assert list(outside.iterdir()) == []
    await store.close()


async def test_a_symlink_at_a_key_is_no_object_and_is_never_written_through(
    tmp_path: Path,
) -> None:
    root, outside = tmp_path / "store", tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_bytes(b"keep me")
    store = FileStore(root)
    for key in ("put", "absent", "match", "deleted"):
        (root / key).symlink_to(victim)
    with pytest.raises(NotFound):
        await store.get("put")
    with pytest.raises(NotFound):
        await store.head("put")
    with pytest.raises(NotFound):
        await store.put_if_match("match", b"x", '"0"')
    with pytest.raises(AlreadyExists):  # the name is taken, though by no object
        await store.put_if_absent("absent", b"x")
    await store.put("put", b"replaces the link, inside the root")
    await store.delete("deleted")
    for i in range(8):  # later writes reuse whatever inodes the store kept
        await store.put(f"later/{i}", b"x" * i)
        await store.delete(f"later/{i}")
    assert victim.read_bytes() == b"keep me"
    assert not (root / "put").is_symlink()
    assert (await store.get("put")).data == b"replaces the link, inside the root"
    await store.close()


async def test_stale_temp_files_are_swept_on_open(tmp_path: Path) -> None:
    root = tmp_path / "store"
    FileStore(root)
    tmp = root / RESERVED_SEGMENT
    stale, fresh = tmp / "dead.tmp", tmp / "live.tmp"
    stale.write_bytes(b"crashed writer")
    fresh.write_bytes(b"writing right now")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    FileStore(root)
    assert not stale.exists()
    assert fresh.exists()


# -- on disk ------------------------------------------------------------------------------


async def test_keys_are_plain_paths_and_no_temp_files_remain(file_store: FileStore) -> None:
    await file_store.put("outcomes/r1", b"done")
    await file_store.put_if_absent("memos/r1/i/step", b"memo")
    etag = await file_store.put("lease", b"1")
    await file_store.put_if_match("lease", b"2", etag)
    root = Path(file_store.root)
    assert (root / "outcomes" / "r1").read_bytes() == b"done"
    assert (root / "memos" / "r1" / "i" / "step").read_bytes() == b"memo"
    assert [i.key for i in await file_store.list()] == ["lease", "memos/r1/i/step", "outcomes/r1"]
    assert [i.key for i in await file_store.list(".step")] == []
    # The replaced lease's inode waits as a spare; closing the store frees it.
    tmp = root / RESERVED_SEGMENT
    own = ("locks", "journal")  # the store's own directories
    assert [p.suffix for p in tmp.iterdir() if p.name not in own] == [".spare"]
    await file_store.close()
    assert [p for p in tmp.iterdir() if p.name not in own] == []


# -- recycled inodes ------------------------------------------------------------------


async def test_a_retired_inode_becomes_a_later_object_with_a_new_etag(tmp_path: Path) -> None:
    async with FileStore(tmp_path / "s") as store:
        first = await store.put("a", b"first")
        inode = os.stat(tmp_path / "s" / "a").st_ino
        await store.delete("a")
        # The deleted object's inode is rewritten as the next object...
        await store.put("b", b"second")
        assert os.stat(tmp_path / "s" / "b").st_ino == inode
        assert (await store.get("b")).data == b"second"
        # ...and when it comes back to its old key, its etag is not the old one.
        await store.delete("b")
        again = await store.put("a", b"first")
        assert os.stat(tmp_path / "s" / "a").st_ino == inode
        assert again != first
        with pytest.raises(PreconditionFailed):
            await store.put_if_match("a", b"stale writer", first)


def _read_interrupted_by(monkeypatch: pytest.MonkeyPatch, interfere: Any) -> None:
    """Make the next FileStore read run ``interfere()`` between opening the
    file and reading it: a reader that lost the race to a writer."""
    import builtins

    import stepstone.store.file.reads as file_module

    real_open = builtins.open
    pending = [interfere]

    class Interrupted:
        def __init__(self, f: Any) -> None:
            self._f = f

        def __enter__(self) -> Interrupted:
            return self

        def __exit__(self, *exc: object) -> None:
            self._f.close()

        def fileno(self) -> int:
            return int(self._f.fileno())

        def read(self) -> bytes:
            if pending:
                pending.pop()()
            return bytes(self._f.read())

    def hooked(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        return Interrupted(real_open(path, mode, *args, **kwargs))

    monkeypatch.setattr(file_module, "open", hooked, raising=False)


async def test_a_read_never_returns_bytes_of_the_object_its_inode_became(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path / "s")
    store._commit_one(Write("key", b"key's bytes"))

    def replace_then_reuse() -> None:
        # While the reader holds the old file open: the key gets new bytes
        # (its old inode retired), and another object is written into that inode.
        store._commit_one(Write("key", b"key's new bytes"))
        store._commit_one(Write("other", b"OTHER OBJECT"))

    _read_interrupted_by(monkeypatch, replace_then_reuse)
    got = store._get("key")
    assert got.data == b"key's new bytes"
    assert got.etag == (await store.head("key")).etag

    def delete_then_reuse() -> None:
        store._commit_one(Write("key", None))
        store._commit_one(Write("third", b"THIRD OBJECT"))

    _read_interrupted_by(monkeypatch, delete_then_reuse)
    with pytest.raises(NotFound):
        store._get("key")
    await store.close()


def test_a_forked_child_does_not_use_its_parents_spares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stepstone.store.file import spares as file_spares

    pool = file_spares.SparePool(str(tmp_path))
    name = pool.reserve()
    assert name is not None
    (tmp_path / Path(name).name).write_bytes(b"")
    pool.add(name)
    assert len(pool) == 1
    monkeypatch.setattr(file_spares, "forks", lambda: 99)  # as if in a forked child
    assert pool.take() is None
    assert pool.reserve() != name


def test_the_spare_pool_is_bounded(tmp_path: Path) -> None:
    from stepstone.store.file.spares import SparePool

    pool = SparePool(str(tmp_path), limit=2)
    for _ in range(2):
        name = pool.reserve()
        assert name is not None
        pool.add(name)
    assert pool.reserve() is None


async def test_etag_changes_on_every_write_even_of_equal_bytes(file_store: FileStore) -> None:
    # Inodes get reused and kernel timestamps can be coarse; the etag must still change,
    # or a compare-and-swap holding an old etag would succeed against a newer write.
    etags = [await file_store.put("k", b"same") for _ in range(50)]
    assert len(set(etags)) == 50
    stale = etags[0]
    with pytest.raises(PreconditionFailed):
        await file_store.put_if_match("k", b"x", stale)


async def test_modified_is_the_files_mtime(file_store: FileStore) -> None:
    await file_store.put("k", b"x")
    info = await file_store.head("k")
    assert info.modified == os.stat(Path(file_store.root) / "k").st_mtime_ns / 1e9


async def test_a_key_and_a_key_under_it_cannot_coexist(file_store: FileStore) -> None:
    await file_store.put("a", b"file")
    with pytest.raises(InvalidKey, match="cannot both exist"):
        await file_store.put("a/b", b"x")
    await file_store.put("c/d", b"x")
    with pytest.raises(InvalidKey, match="cannot both exist"):
        await file_store.put_if_absent("c", b"x")
    with pytest.raises(NotFound):
        await file_store.get("c")  # a directory is not an object
    with pytest.raises(NotFound):
        await file_store.get("a/b")


async def test_foreign_files_in_the_root_are_ignored_by_listing(file_store: FileStore) -> None:
    root = Path(file_store.root)
    await file_store.put("good", b"x")
    os.mkfifo(root / "fifo")
    (root / "dir-only").mkdir()
    os.close(os.open(os.path.join(os.fsencode(root), b"bad-\xff"), os.O_CREAT | os.O_WRONLY))
    assert [i.key for i in await file_store.list()] == ["good"]


async def test_store_works_after_close_from_a_new_loop(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s")
    await store.put("k", b"1")
    await store.close()

    def other_loop() -> bytes:
        return asyncio.run(store.get("k")).data

    assert await asyncio.to_thread(other_loop) == b"1"
    await store.close()


async def test_durable_write_latency(file_store: FileStore) -> None:
    """Not a benchmark gate: records the fsync-bound cost of one write for the docs."""
    n = 20
    start = time.perf_counter()
    for i in range(n):
        await file_store.put(f"lat/{i}", b"x" * 1024)
    per_write = (time.perf_counter() - start) / n
    print(f"durable 1 KiB FileStore.put: {per_write * 1000:.2f} ms")
    assert per_write < 1.0


# -- the group commit ----------------------------------------------------------------
# A write is durable when it returns: its bytes were flushed before its name
# appeared, and its name was flushed before the caller heard back. These tests
# watch the real syscalls (wrapped, still performed) on a timeline.

needs_syncfs = pytest.mark.skipif(not HAVE_SYNCFS, reason="this platform has no syncfs")


class _Timeline:
    """Orders syscalls from every thread: utime on a temp file (its bytes are
    written), link/rename into place, and syncfs (start, end)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import itertools
        import threading

        import stepstone.store.file.commit as file_module

        self._tick = itertools.count()
        self._lock = threading.Lock()
        self.written: dict[int, int] = {}  # inode -> when its bytes were last written
        self.placed: dict[str, tuple[int, int]] = {}  # path -> (when, inode)
        self.syncs: list[tuple[int, int]] = []
        real_utime, real_link, real_rename = os.utime, os.link, os.rename
        real_syncfs = file_module.syncfs

        def utime(fd: Any, *args: Any, **kwargs: Any) -> None:
            real_utime(fd, *args, **kwargs)
            if isinstance(fd, int):
                self.written[os.fstat(fd).st_ino] = self.now()

        def place(real: Any) -> Any:
            def wrapper(src: str, dst: str) -> None:
                ino = os.stat(src).st_ino
                real(src, dst)
                self.placed[os.fspath(dst)] = (self.now(), ino)

            return wrapper

        def syncfs(fd: int) -> None:
            start = self.now()
            real_syncfs(fd)
            self.syncs.append((start, self.now()))

        monkeypatch.setattr(os, "utime", utime)
        monkeypatch.setattr(os, "link", place(real_link))
        monkeypatch.setattr(os, "rename", place(real_rename))
        monkeypatch.setattr(file_module, "syncfs", syncfs)

    def now(self) -> int:
        with self._lock:
            return next(self._tick)

    def synced_between(self, after: int, before: int) -> bool:
        return any(after < start and end < before for start, end in self.syncs)


@needs_syncfs
async def test_a_write_returns_only_after_its_bytes_and_then_its_name_were_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    timeline = _Timeline(monkeypatch)
    async with FileStore(tmp_path / "s", sync="syncfs") as store:
        etag = await store.put("k/replaced", b"old")

        async def write(i: int) -> tuple[str, int, int]:
            asked = timeline.now()
            if i == 0:
                await store.put_if_match("k/replaced", b"new", etag)
                key = "k/replaced"
            else:
                key = f"k/{i:02d}"
                await (store.put if i % 2 else store.put_if_absent)(key, b"%d" % i)
            return key, asked, timeline.now()

        results = await asyncio.gather(*(write(i) for i in range(40)))
    for key, asked, answered in results:
        placed_at, ino = timeline.placed[str(tmp_path / "s" / key)]
        written_at = timeline.written[ino]
        assert asked < written_at < placed_at < answered
        assert timeline.synced_between(written_at, placed_at), f"{key}: named before its bytes"
        assert timeline.synced_between(placed_at, answered), f"{key}: answered before its name"
    # ...and the 41 writes shared their syncs (each alone would take two).
    assert len(timeline.syncs) < 41


async def test_one_failing_write_in_a_batch_fails_alone(tmp_path: Path) -> None:
    async with FileStore(tmp_path / "s") as store:
        await store.put("exists", b"x")
        outcomes = await asyncio.gather(
            store.put_if_absent("exists", b"again"),
            store.put_if_match("missing", b"y", '"stale"'),
            store.put_if_match("exists", b"y", '"stale"'),
            store.delete("exists", if_match='"stale"'),
            store.put("../escape", b"z"),
            *(store.put_if_absent(f"ok/{i}", b"%d" % i) for i in range(10)),
            return_exceptions=True,
        )
        assert [type(o) for o in outcomes[:5]] == [
            AlreadyExists,
            NotFound,
            PreconditionFailed,
            PreconditionFailed,
            InvalidKey,
        ]
        assert all(isinstance(o, str) for o in outcomes[5:])
        assert (await store.get("exists")).data == b"x"
        assert [(await store.get(f"ok/{i}")).data for i in range(10)] == [
            b"%d" % i for i in range(10)
        ]


async def test_writes_to_one_key_in_one_batch_apply_in_order(tmp_path: Path) -> None:
    """Queued together, two creates of one key have one winner, and a put
    queued after a delete of the same key leaves the put's bytes."""
    async with FileStore(tmp_path / "s") as store:
        first, second = await asyncio.gather(
            store.put_if_absent("one", b"a"),
            store.put_if_absent("one", b"b"),
            return_exceptions=True,
        )
        assert isinstance(first, str) and isinstance(second, AlreadyExists)
        await asyncio.gather(store.delete("one"), store.put("one", b"c"))
        assert (await store.get("one")).data == b"c"


@pytest.mark.parametrize("mode", ["fsync", "syncfs"])
async def test_both_sync_modes_keep_the_contract(tmp_path: Path, mode: str) -> None:
    if mode == "syncfs" and not HAVE_SYNCFS:
        pytest.skip("this platform has no syncfs")
    async with FileStore(tmp_path / "s", sync=mode) as store:  # type: ignore[arg-type]
        assert store.sync_mode == mode
        etag = await store.put_if_absent("a/b/c", b"1")
        etag = await store.put_if_match("a/b/c", b"2", etag)
        await store.delete("a/b/c", if_match=etag)
        with pytest.raises(NotFound):
            await store.get("a/b/c")


def test_an_unknown_sync_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreConfigError, match="sync="):
        FileStore(tmp_path, sync="sometimes")  # type: ignore[arg-type]
    with pytest.raises(StoreConfigError, match="commit_in="):
        FileStore(tmp_path, commit_in="elsewhere")  # type: ignore[arg-type]


@needs_syncfs
async def test_a_failed_sync_leaves_placed_objects_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fails the flush after a create was linked into place: the
    caller hears StoreUnavailable, and the object's inode is not mistaken for
    a spare (rewriting it as the next object would change the first)."""
    import errno

    import stepstone.store.file.commit as file_module
    from stepstone.store import StoreUnavailable

    real = file_module.syncfs
    calls = 0

    def second_sync_fails(fd: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:  # the names sync of the first batch
            raise OSError(errno.EIO, "I/O error")
        real(fd)

    monkeypatch.setattr(file_module, "syncfs", second_sync_fails)
    async with FileStore(tmp_path / "s", sync="syncfs") as store:
        with pytest.raises(StoreUnavailable):
            await store.put_if_absent("placed", b"the first object")
        for i in range(3):
            await store.put(f"later/{i}", b"later %d" % i)
        assert (await store.get("placed")).data == b"the first object"


def _child_after_fork(store: FileStore, results: Any) -> None:
    async def main() -> bytes:
        await store.put("from-child", b"child")
        return (await store.get("from-parent")).data

    results.put(asyncio.run(main()))


async def test_a_store_used_before_a_fork_works_in_the_child(tmp_path: Path) -> None:
    """A preloading server (gunicorn --preload) forks after the store was
    used: the child must not wait on the parent's threads."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    store = FileStore(tmp_path / "s")
    await store.put("from-parent", b"parent")  # the pool and its threads exist now
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
