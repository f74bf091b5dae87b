"""The FileStore's create journal: one flush per batch of creates, and what a
recovery makes of a journal its process left behind.

A power cut cannot be pulled in a test. What it can do to the disk can be
written down, though: after one, a name or a file's bytes that were never
flushed may be gone, or the name may be there with its bytes lost. The tests
here kill a writer (SIGKILL, in a child process) at the moments that matter,
then do to its files the worst a power cut could, then open the store as the
machine's next boot would (another boot id), and check what is there.
"""

from __future__ import annotations

import asyncio
import fcntl
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import stepstone.store.file.creates as creates_module
import stepstone.store.file.recovery as recovery_module
from stepstone.store import AlreadyExists, FileStore
from stepstone.store.file import RecoverableObject
from stepstone.store.file.flush import HAVE_SYNCFS
from stepstone.store.file.journal import (
    CREATE,
    HEADER_SIZE,
    Journal,
    create_entry,
    read_journal,
)
from stepstone.store.file.store import CommitIn
from stepstone.store.file.temp_files import STALE_TEMP_SECONDS
from stepstone.store.keys import RESERVED_SEGMENT

DEADLINE = 60.0


def _journals(root: Path) -> list[Path]:
    return sorted((root / RESERVED_SEGMENT / "journal").glob("*.journal"))


def _another_boot(monkeypatch: pytest.MonkeyPatch) -> None:
    """Open stores as the machine's next boot would."""
    monkeypatch.setattr(recovery_module, "boot_id", lambda: b"\x01" * 16)


def _recovered(key: str) -> bytes:
    return b"recovered " + key.encode()


def _objects(prefix: str, n: int) -> list[RecoverableObject]:
    return [
        RecoverableObject(f"{prefix}/{i}", f"{prefix} {i}".encode(), _recovered(f"{prefix}/{i}"))
        for i in range(n)
    ]


# -- in a child process, killed where it hurts -----------------------------------


def _child(root: str, script: str, log: str) -> None:
    """Run ``script`` against a store whose journal is never retired (as if no
    flush of the filesystem had happened since its creates), logging each
    answered key, then die without closing anything."""
    from stepstone.store.file.journal import Journal

    Journal.retire = lambda self, mark: None  # type: ignore[method-assign]

    def note(keys: list[str]) -> None:
        with open(log, "a") as answered:
            answered.write("".join(k + "\n" for k in keys))

    async def main() -> None:
        await SCRIPTS[script](FileStore(root), note)
        os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main())


async def _answered_creates(store: FileStore, note: Callable[[list[str]], None]) -> None:
    for batch in range(4):
        objects = _objects(f"b{batch}", 10)
        results = await store.put_many_if_absent(objects)
        assert all(isinstance(r, str) for r in results)
        note([o.key for o in objects])


async def _killed_before_linking(store: FileStore, note: Callable[[list[str]], None]) -> None:
    def die(src: str, dst: str) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    creates_module.os.link = die  # type: ignore[attr-defined]
    await store.put_many_if_absent(_objects("never", 5))


async def _refused_then_deleted(store: FileStore, note: Callable[[list[str]], None]) -> None:
    await store.put("taken", b"first")
    results = await store.put_many_if_absent(
        [
            RecoverableObject("taken", b"second", b"second, recovered"),
            RecoverableObject("free", b"x", b"y"),
        ]
    )
    assert isinstance(results[0], AlreadyExists) and isinstance(results[1], str)
    await store.delete("taken")  # a naive recovery would now make "taken" hold "second"
    note(["free"])


async def _replaced_and_deleted(store: FileStore, note: Callable[[list[str]], None]) -> None:
    await store.put_many_if_absent(
        [
            RecoverableObject("replaced", b"v1", b"v1, recovered"),
            RecoverableObject("deleted", b"d", b"d, recovered"),
        ]
    )
    await store.put("replaced", b"v2")
    await store.delete("deleted")
    note(["replaced", "deleted"])


async def _answered_alone(store: FileStore, note: Callable[[list[str]], None]) -> None:
    """Creates one at a time: after the first, on a fast disk, each is
    committed on the caller's thread."""
    for obj in _objects("alone", 12):
        [result] = await store.put_many_if_absent([obj])
        assert isinstance(result, str)
        note([obj.key])


SCRIPTS: dict[str, Callable[[FileStore, Callable[[list[str]], None]], Any]] = {
    "answered": _answered_creates,
    "answered-alone": _answered_alone,
    "killed-before-linking": _killed_before_linking,
    "refused-then-deleted": _refused_then_deleted,
    "replaced-and-deleted": _replaced_and_deleted,
}


def _run_child(root: Path, script: str) -> list[str]:
    """Run a script in a spawned child until it kills itself; the keys it was answered."""
    FileStore(root)  # the directory, made before the child (the store creates none by URL)
    log = root.parent / f"{script}.log"
    process = multiprocessing.get_context("spawn").Process(
        target=_child, args=(str(root), script, str(log))
    )
    process.start()
    process.join(DEADLINE)
    assert process.exitcode == -signal.SIGKILL
    return log.read_text().split() if log.exists() else []


def _power_cut(root: Path, keys: list[str]) -> None:
    """Do to ``keys`` the worst a power cut could to files and names never
    flushed: by turns, the name is lost; the file is there, empty; the file is
    there, its bytes never written (zeros). The metadata a torn file keeps is
    the inode's: its mtime stays."""
    for i, key in enumerate(keys):
        path = root / key
        st = path.stat()
        if i % 3 == 0:
            path.unlink()
            continue
        with open(path, "r+b") as f:
            if i % 3 == 1:
                f.truncate(0)
            else:
                f.write(bytes(st.st_size))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


# -- the ordering on the way in ---------------------------------------------------


class _Timeline:
    """Orders, from every thread: writes into the journal (which keys they
    carry), fdatasync and syncfs calls (start, end), and links into place."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import itertools

        import stepstone.store.file.commit as commit_module
        import stepstone.store.file.journal as journal_module
        import stepstone.store.file.store as store_module

        self._tick = itertools.count()
        self._lock = threading.Lock()
        self.journaled: dict[bytes, int] = {}  # a value -> when the journal got it
        self.flushes: list[tuple[int, int]] = []  # fdatasync of the journal
        self.syncs: list[tuple[int, int]] = []  # syncfs, anyone's
        self.linked: dict[str, int] = {}
        self.linked_by: dict[str, int] = {}  # the thread that linked a path
        real_pwrite, real_fdatasync, real_link = os.pwrite, os.fdatasync, os.link

        def pwrite(fd: int, data: Any, offset: int) -> int:
            done = real_pwrite(fd, data, offset)
            now = self.now()
            for value in self.values:
                if bytes(value) in bytes(data):
                    self.journaled.setdefault(value, now)
            return done

        def fdatasync(fd: int) -> None:
            start = self.now()
            real_fdatasync(fd)
            self.flushes.append((start, self.now()))

        def link(src: str, dst: str) -> None:
            real_link(src, dst)
            self.linked[os.fspath(dst)] = self.now()
            self.linked_by[os.fspath(dst)] = threading.get_ident()

        def counted_syncfs(real: Callable[[int], None]) -> Callable[[int], None]:
            def syncfs(fd: int) -> None:
                start = self.now()
                real(fd)
                self.syncs.append((start, self.now()))

            return syncfs

        self.values: list[bytes] = []
        monkeypatch.setattr(journal_module.os, "pwrite", pwrite)
        monkeypatch.setattr(journal_module.os, "fdatasync", fdatasync)
        monkeypatch.setattr(creates_module.os, "link", link)
        for module in (commit_module, store_module):
            monkeypatch.setattr(module, "syncfs", counted_syncfs(module.syncfs))

    def now(self) -> int:
        with self._lock:
            return next(self._tick)

    def flushed_between(self, after: int, before: int) -> bool:
        return any(after < start and end < before for start, end in self.flushes)


async def test_a_create_is_answered_once_its_journal_entry_is_flushed_and_its_name_placed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each create: its bytes reach the journal, one fdatasync flushes them,
    then its name is placed, then it is answered; no flush of the whole
    filesystem is waited for; and the creates share their flushes."""
    timeline = _Timeline(monkeypatch)
    monkeypatch.setattr("stepstone.store.file.store.CHECKPOINT_DELAY", 60.0)
    objects = _objects("k", 40)
    timeline.values = [o.data for o in objects]
    root = tmp_path / "s"
    async with FileStore(root) as store:

        async def create(group: list[RecoverableObject]) -> tuple[int, int]:
            asked = timeline.now()
            results = await store.put_many_if_absent(group)
            assert all(isinstance(r, str) for r in results)
            return asked, timeline.now()

        # 30 callers one object each, and one caller with ten, all at once
        groups = [[o] for o in objects[:30]] + [objects[30:]]
        spans = await asyncio.gather(*(create(group) for group in groups))
        for group, (asked, answered) in zip(groups, spans, strict=True):
            for obj in group:
                journaled = timeline.journaled[obj.data]
                linked = timeline.linked[str(root / obj.key)]
                assert asked < journaled < linked < answered
                assert timeline.flushed_between(journaled, linked), f"{obj.key}: linked unflushed"
        assert not any(
            asked < s and e < answered for s, e in timeline.syncs for asked, answered in spans
        )
        assert len(timeline.flushes) < len(groups)
        assert [(await store.get(o.key)).data for o in objects] == [o.data for o in objects]


async def test_a_create_alone_on_a_fast_disk_is_committed_on_the_callers_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creates made one at a time keep the order above (journaled, flushed,
    linked, answered) and take no trip to the store's thread while the
    journal flushes fast: handing a lone create over and back costs more
    than its flush. On a slow disk they take the store's thread."""
    timeline = _Timeline(monkeypatch)
    monkeypatch.setattr("stepstone.store.file.store.CHECKPOINT_DELAY", 60.0)
    objects = _objects("k", 8)
    timeline.values = [o.data for o in objects]
    root = tmp_path / "s"
    here = threading.get_ident()
    async with FileStore(root) as store:
        await store.put_many_if_absent(_objects("first", 1))  # opens the journal
        for i, obj in enumerate(objects):
            # how fast the journal flushed lately, as the store measured it
            store._journal.flush_seconds = 0.0001 if i < 4 else 0.05
            asked = timeline.now()
            [result] = await store.put_many_if_absent([obj])
            answered = timeline.now()
            assert isinstance(result, str)
            path = str(root / obj.key)
            journaled, linked = timeline.journaled[obj.data], timeline.linked[path]
            assert asked < journaled < linked < answered
            assert timeline.flushed_between(journaled, linked)
            assert (timeline.linked_by[path] == here) == (i < 4), f"create {i}"


async def test_creates_from_two_event_loops_never_commit_at_once(tmp_path: Path) -> None:
    """Two threads, each with its own event loop, creating in one store (one
    at a time, and gathered), while this loop does too: the journal's groups
    must be committed one after another, whichever thread commits them."""
    running, overlaps = 0, 0
    guard = threading.Lock()
    real = creates_module.Creator._commit

    def watched(self: creates_module.Creator, batches: list[Any]) -> None:
        nonlocal running, overlaps
        with guard:
            running += 1
            overlaps += running > 1
        try:
            real(self, batches)
        finally:
            with guard:
                running -= 1

    creates_module.Creator._commit = watched  # type: ignore[method-assign]
    try:
        async with FileStore(tmp_path / "s") as store:

            async def make(prefix: str) -> None:
                for obj in _objects(prefix, 30):
                    assert isinstance((await store.put_many_if_absent([obj]))[0], str)
                gathered = await asyncio.gather(
                    *(store.put_many_if_absent([o]) for o in _objects(prefix + "g", 20))
                )
                assert all(isinstance(r, str) for [r] in gathered)

            threads = [
                threading.Thread(target=asyncio.run, args=(make(f"t{i}"),)) for i in range(2)
            ]
            for thread in threads:
                thread.start()
            await make("main")
            for thread in threads:
                await asyncio.to_thread(thread.join, DEADLINE)
                assert not thread.is_alive()
            for prefix in ("t0", "t1", "main"):
                for obj in _objects(prefix, 30) + _objects(prefix + "g", 20):
                    assert (await store.get(obj.key)).data == obj.data
    finally:
        creates_module.Creator._commit = real  # type: ignore[method-assign]
    assert overlaps == 0


# -- what a recovery makes of a journal left behind ------------------------------


@pytest.mark.parametrize(("script", "count"), [("answered", 40), ("answered-alone", 12)])
def test_after_a_power_cut_every_answered_create_is_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, count: int
) -> None:
    """The writer is killed right after its last answer, before any flush of
    the filesystem; then every name and file it made since is lost or torn.
    The journal alone brings each back, holding its ``recovered`` bytes:
    creates made in batches and creates made one at a time alike."""
    root = tmp_path / "s"
    answered = _run_child(root, script)
    assert len(answered) == count
    _power_cut(root, answered)
    _another_boot(monkeypatch)
    store = FileStore(root)
    for key in answered:
        assert (root / key).read_bytes() == _recovered(key), key
    assert _journals(root) == []
    asyncio.run(store.close())


def test_a_process_killed_in_this_boot_leaves_its_creates_as_they_are(tmp_path: Path) -> None:
    """No power cut: the page cache kept everything. The journal is flushed
    away with one syncfs, and nothing is rewritten."""
    root = tmp_path / "s"
    answered = _run_child(root, "answered")
    before = {key: (root / key).stat().st_ino for key in answered}
    FileStore(root)
    assert {key: (root / key).stat().st_ino for key in answered} == before
    assert all((root / key).read_bytes() == key.replace("/", " ").encode() for key in answered)
    assert _journals(root) == []


def test_creates_killed_between_the_journal_flush_and_their_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Never answered: after a power cut a recovery may make them (a create
    that timed out may have happened); in the same boot they never were."""
    same_boot = tmp_path / "same"
    _run_child(same_boot, "killed-before-linking")
    FileStore(same_boot)
    assert list((same_boot / "never").iterdir()) == []  # (its directory was made)
    assert _journals(same_boot) == []

    rebooted = tmp_path / "rebooted"
    _run_child(rebooted, "killed-before-linking")
    _another_boot(monkeypatch)
    FileStore(rebooted)
    assert sorted(p.name for p in (rebooted / "never").iterdir()) == [str(i) for i in range(5)]


def test_a_refused_create_is_never_made_by_a_recovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "s"
    _run_child(root, "refused-then-deleted")
    (root / "free").unlink()  # lost to the power cut
    _another_boot(monkeypatch)
    FileStore(root)
    assert not (root / "taken").exists()
    assert (root / "free").read_bytes() == b"y"


def test_a_later_object_stands_and_a_deleted_one_comes_back_as_recovered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key written since its create keeps that write (it was made durable
    the usual way). A key deleted while its create's entry was still needed
    cannot be told from a create the cut undid: it comes back, holding the
    bytes its creator chose for that case."""
    root = tmp_path / "s"
    _run_child(root, "replaced-and-deleted")
    _another_boot(monkeypatch)
    FileStore(root)
    assert (root / "replaced").read_bytes() == b"v2"
    assert (root / "deleted").read_bytes() == b"d, recovered"


def _hold_a_journal(root: str, ready: Any, release: Any) -> None:
    async def main() -> None:
        async with FileStore(root) as store:
            await store.put_many_if_absent(_objects("live", 3))
            ready.set()
            await asyncio.to_thread(release.wait)  # (a multiprocessing Event)

    asyncio.run(main())


def test_a_live_processs_journal_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "s"
    FileStore(root)
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_a_journal, args=(str(root), ready, release))
    holder.start()
    try:
        assert ready.wait(DEADLINE)
        (root / "live" / "0").unlink()  # as if lost: a recovery would write it back
        _another_boot(monkeypatch)
        FileStore(root)
        assert not (root / "live" / "0").exists()
        assert len(_journals(root)) == 1
    finally:
        release.set()
        holder.join(DEADLINE)
    assert holder.exitcode == 0
    assert _journals(root) == []  # closed: flushed and removed


async def test_a_store_opened_while_another_makes_its_journal_leaves_it_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal is locked by its maker before a recovery can find it: a store
    opened on the root at that moment (here, just before the lock is taken)
    must not take it for a dead process's journal and remove it."""
    root = tmp_path / "s"
    opened: list[bool] = []
    real_flock = fcntl.flock

    def flock(fd: int, operation: int) -> None:
        if operation & fcntl.LOCK_NB and not opened:  # the journal's own lock
            opened.append(True)
            FileStore(root)  # its recovery reads the journals now
        real_flock(fd, operation)

    async with FileStore(root) as store:
        monkeypatch.setattr(fcntl, "flock", flock)
        await store.put_many_if_absent(_objects("made", 3))
        monkeypatch.undo()
        assert opened, "the journal was made without a lock"
        assert len(_journals(root)) == 1
        assert [(root / "made" / str(i)).read_bytes() for i in range(3)] == [
            f"made {i}".encode() for i in range(3)
        ]
    assert _journals(root) == []


def test_a_journal_its_maker_died_before_naming_is_swept_after_an_hour(tmp_path: Path) -> None:
    root = tmp_path / "s"
    FileStore(root)
    directory = root / RESERVED_SEGMENT / "journal"
    old, new = directory / "a.journal.tmp", directory / "b.journal.tmp"
    old.write_bytes(b"")
    new.write_bytes(b"")
    an_hour_ago = time.time() - STALE_TEMP_SECONDS - 1
    os.utime(old, (an_hour_ago, an_hour_ago))
    FileStore(root)
    assert sorted(p.name for p in directory.iterdir()) == ["b.journal.tmp"]


# -- the journal file ---------------------------------------------------------------


def _journal(directory: Path) -> Journal:
    return Journal(
        str(directory),
        "file://test",
        sync=lambda paths: None,
        start=lambda fn: None,
        checkpoint_delay=0,
    )


def test_a_torn_tail_ends_the_entries_and_a_new_epoch_hides_the_old(tmp_path: Path) -> None:
    journal = _journal(tmp_path)
    st = os.stat(tmp_path)
    journal.record(CREATE, [create_entry(f"a/{i}", st, b"a", None) for i in range(3)])
    journal.linked([])
    [path] = tmp_path.glob("*.journal")
    with open(path, "rb") as f:
        _, entries = read_journal(f.fileno())
    assert [e.key for e in entries] == ["a/0", "a/1", "a/2"]
    assert entries[0].recovered == b"a"

    # A group torn by the cut: its first entry's last byte never reached the disk.
    journal.record(CREATE, [create_entry("b/0", st, b"bbbb", b"r")])
    journal.linked([])
    size = path.stat().st_size
    data = path.read_bytes()
    end = data.rindex(b"bbbbr") + 5
    with open(path, "r+b") as f:
        f.seek(end - 1)
        f.write(b"\0")
    assert path.stat().st_size == size
    with open(path, "rb") as f:
        _, entries = read_journal(f.fileno())
    assert [e.key for e in entries] == ["a/0", "a/1", "a/2"]

    # Everything retired: the next epoch starts at the top, the old one is not read.
    journal.retire(journal.mark())
    journal.record(CREATE, [create_entry("c/0", st, b"c", None)])
    journal.linked([])
    with open(path, "rb") as f:
        _, entries = read_journal(f.fileno())
    assert [e.key for e in entries] == ["c/0"]
    assert os.path.getsize(path) > HEADER_SIZE
    journal.close()
    assert list(tmp_path.glob("*.journal")) == []


@pytest.mark.skipif(not HAVE_SYNCFS, reason="this platform has no syncfs")
@pytest.mark.parametrize("commit_in", ["thread", "process"])
async def test_the_stores_own_flushes_retire_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, commit_in: CommitIn
) -> None:
    """A batch of ordinary writes flushes the filesystem anyway, in this
    process or in its helper: the creates linked before it need their
    entries no more, and the journal starts over."""
    monkeypatch.setattr(Journal, "checkpoint_soon", lambda self: None)  # (only the batch can)
    async with FileStore(tmp_path / "s", commit_in=commit_in) as store:
        await store.put("first", b"x")  # (the helper is up after this one)
        assert store.committing_in == commit_in
        await store.put_many_if_absent(_objects("k", 3))
        journal = store._journal
        assert journal.mark() > 0
        await store.put("ordinary", b"x")  # answered after its syncfs, which retired them
        assert journal._retired == journal.mark()
