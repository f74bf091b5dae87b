"""A FileStore's commit process: when it starts, and what happens when it dies.

The contract itself runs over a store committing in its helper in
``test_store_conformance`` (``file_process``); these are the helper's own
life and deaths, with real processes and real signals.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Callable
from pathlib import Path

import pytest

import stepstone.store.file.store as store_module
from stepstone.store import FileStore, StoreUnavailable
from stepstone.store.file.commit_process import CommitProcess, CpuWatch
from stepstone.store.file.flush import HAVE_SYNCFS
from stepstone.testing import wait_until_sync

DEADLINE = 30.0
HELPER = "stepstone.store.file.commit_process"
SYNC = "syncfs" if HAVE_SYNCFS else "fsync"

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc"), reason="finds the helper process through /proc (Linux)"
)


def helpers_of(pid: int) -> list[int]:
    """The live commit processes whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if int(ppid) == pid and state != "Z" and HELPER.encode() in cmdline:
            found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(condition: Callable[[], bool], what: str) -> None:
    wait_until_sync(condition, timeout=DEADLINE, message=what)


async def first_write_started_its_helper(store: FileStore) -> int:
    """Write once to a store committing in its helper; the helper's pid."""
    await store.put("first", b"1")
    (helper,) = helpers_of(os.getpid())
    return helper


def unread_bytes(pid: int) -> int:
    """How many bytes wait in the pipe that is ``pid``'s stdin."""
    fd = os.open(f"/proc/{pid}/fd/0", os.O_RDONLY | os.O_NONBLOCK)
    try:
        return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])
    finally:
        os.close(fd)


async def test_auto_starts_a_helper_once_the_store_is_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "COMMIT_PROCESS_AFTER", 20)
    monkeypatch.setattr(store_module, "worth_starting", lambda idle_cpus: True)
    store = FileStore(tmp_path / "s")
    try:
        for i in range(20):
            await store.put(f"k/{i}", b"v")
        assert helpers_of(os.getpid()) == []  # (started by the write after those)
        await store.put("k/20", b"v")
        assert len(helpers_of(os.getpid())) == 1
        # the writes go on, committed here until it is up, then there
        for i in range(21, 200):
            etag = await store.put_if_absent(f"k/{i}", b"%d" % i)
            assert (await store.head(f"k/{i}")).etag == etag
        assert len(await store.list("k/")) == 200
    finally:
        await store.close()
    assert helpers_of(os.getpid()) == []


async def test_auto_starts_no_helper_while_no_cpu_sits_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "COMMIT_PROCESS_AFTER", 20)
    idle = [0.1]  # CPUs idle in each stretch of 20 writes (four workers on two CPUs: about none)
    monkeypatch.setattr(CpuWatch, "idle_since_last_look", lambda watch: idle[0])
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    store = FileStore(tmp_path / "s")
    try:
        for i in range(100):
            await store.put(f"k/{i}", b"v")
        assert helpers_of(os.getpid()) == []
        idle[0] = 1.0  # (the other workers stopped: it looks again and starts one)
        for i in range(100, 121):
            await store.put(f"k/{i}", b"v")
        assert len(helpers_of(os.getpid())) == 1
    finally:
        await store.close()


async def test_a_store_committing_in_a_thread_starts_no_helper(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s", commit_in="thread")
    try:
        await asyncio.gather(*(store.put(f"k/{i}", b"v") for i in range(300)))
        for i in range(300):
            await store.put(f"k/{i}", b"w")
        assert helpers_of(os.getpid()) == []
    finally:
        await store.close()


async def test_a_helper_killed_between_batches_costs_no_write(
    file_process_store: FileStore, caplog: pytest.LogCaptureFixture
) -> None:
    store = file_process_store
    helper = await first_write_started_its_helper(store)
    os.kill(helper, signal.SIGKILL)
    wait_for(lambda: not alive(helper), "the helper is dead")
    with caplog.at_level(logging.WARNING, logger="stepstone.store.file"):
        etag = await store.put("after", b"2")
    assert (await store.get("after")).etag == etag
    assert "committing in this process from now on" in caplog.text
    assert store.location in caplog.text
    await asyncio.gather(*(store.put(f"more/{i}", b"v") for i in range(50)))
    assert len(await store.list("more/")) == 50
    assert helpers_of(os.getpid()) == []  # (not started again and again)


async def test_a_helper_killed_mid_batch_fails_that_batch_only(
    file_process_store: FileStore,
) -> None:
    store = file_process_store
    helper = await first_write_started_its_helper(store)
    os.kill(helper, signal.SIGSTOP)
    write = asyncio.create_task(store.put("during", b"2"))
    await asyncio.to_thread(wait_for, lambda: unread_bytes(helper) > 0, "the batch is sent")
    os.kill(helper, signal.SIGKILL)
    with pytest.raises(StoreUnavailable, match="may or may not have been made") as caught:
        await asyncio.wait_for(write, DEADLINE)
    assert caught.value.key == "during"
    etag = await store.put("after", b"3")
    assert (await store.get("after")).etag == etag
    assert (await store.get("first")).data == b"1"


async def test_ctrl_c_and_a_service_stop_do_not_reach_the_helper(
    file_process_store: FileStore,
) -> None:
    store = file_process_store
    helper = await first_write_started_its_helper(store)
    os.kill(helper, signal.SIGINT)
    os.kill(helper, signal.SIGTERM)
    await store.put("two", b"2")  # (answered by it: it read both signals before)
    assert helpers_of(os.getpid()) == [helper]
    await store.close()
    assert not alive(helper)


def test_the_helper_exits_when_the_process_that_started_it_is_killed(tmp_path: Path) -> None:
    script = (
        "import asyncio, os, sys\n"
        "from stepstone.store import FileStore\n"
        "async def main():\n"
        f"    store = FileStore({str(tmp_path / 's')!r}, commit_in='process')\n"
        "    await store.put('k', b'v')\n"
        "    print('written', flush=True)\n"
        "    await asyncio.sleep(3600)\n"
        "asyncio.run(main())\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        assert parent.stdout.readline() == b"written\n"
        (helper,) = helpers_of(parent.pid)
    finally:
        parent.kill()
        parent.wait()
    wait_for(lambda: not alive(helper), "the orphaned helper has exited")


def test_a_forked_child_does_not_keep_its_parents_helper(tmp_path: Path) -> None:
    root = tmp_path / "s"
    FileStore(root)  # (makes the directory)
    helper = CommitProcess(str(root), SYNC, f"file://{root}")
    assert helper.ready(DEADLINE)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child: hold on until the parent is done
        os.close(write_end)
        os.read(read_end, 1)
        os._exit(0)
    os.close(read_end)
    try:
        # Its stdin's only writer is this process's copy: it ends at once.
        assert helper.close(timeout=DEADLINE) == 0
    finally:
        os.close(write_end)
        os.waitpid(child, 0)
