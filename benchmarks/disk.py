"""How fast and how dear a durable write is here: ``python -m benchmarks.disk [DIR]``.

Writes small files with fsync (the FileStore's pattern: write, fsync the file,
then fsync the directory) from 1, 8 and 32 threads, and prints writes/s and
the CPU (user + system) each cost this process. On a VM the system time of an
fsync can be far from zero, and it is what a durable FileStore spends.
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import tempfile
import threading
import time


def probe(directory: str, threads: int, total: int = 1200) -> dict[str, float]:
    root = tempfile.mkdtemp(prefix="stepstone-disk-", dir=directory)
    per = max(1, total // threads)

    def work(t: int) -> None:
        for i in range(per):
            fd = os.open(os.path.join(root, f"{t}-{i}"), os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, b"x" * 100)
            os.fsync(fd)
            os.close(fd)
            dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
            os.fsync(dfd)
            os.close(dfd)

    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    shutil.rmtree(root, ignore_errors=True)
    n = per * threads
    return {
        "threads": threads,
        "durable_writes_per_s": round(n / seconds),
        "wall_us": round(seconds / n * 1e6 * threads),
        "user_us": round((after.ru_utime - before.ru_utime) / n * 1e6),
        "sys_us": round((after.ru_stime - before.ru_stime) / n * 1e6),
    }


def filestore_cost(directory: str, n: int = 300) -> list[dict[str, object]]:
    """CPU per FileStore.put_if_absent: called directly (blocking, this
    thread) and through the async API (its thread pool), one at a time."""
    import asyncio

    from store import FileStore

    def usage() -> tuple[float, float, float]:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime, r.ru_stime, time.perf_counter()

    def row(
        how: str, a: tuple[float, float, float], b: tuple[float, float, float]
    ) -> dict[str, object]:
        return {
            "filestore_write": how,
            "wall_us": round((b[2] - a[2]) / n * 1e6),
            "user_us": round((b[0] - a[0]) / n * 1e6),
            "sys_us": round((b[1] - a[1]) / n * 1e6),
        }

    root = tempfile.mkdtemp(prefix="stepstone-disk-", dir=directory)
    store = FileStore(root)
    store._put_if_absent("warm/x", b"x")
    rows = []
    a = usage()
    for i in range(n):
        store._put_if_absent(f"direct/{i:08d}", b"y" * 60)
    rows.append(row("direct (blocking)", a, usage()))

    async def through_api() -> None:
        for i in range(n):
            await store.put_if_absent(f"api/{i:08d}", b"y" * 60)
        await store.close()

    a = usage()
    asyncio.run(through_api())
    rows.append(row("async API (thread pool)", a, usage()))
    shutil.rmtree(root, ignore_errors=True)
    return rows


def main() -> None:
    directory = sys.argv[1] if len(sys.argv) > 1 else tempfile.gettempdir()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for threads in (1, 8, 32):
        print(probe(directory, threads))
    for row in filestore_cost(directory):
        print(row)


if __name__ == "__main__":
    main()
