"""Payload codecs: size and CPU per MB on realistic JSON-like payloads, and
what sealing costs a run end to end.

    python -m benchmarks.payload_codecs [--rounds 3] [--jobs 300] [--out FILE]

**Codecs.** Payloads shaped like what steps return and jobs take: a list of
order records (ids, UUIDs, ISO times, names, addresses, amounts, tags, a
line of free text), as MessagePack (how a step's result is stored) and as
JSON (how an input is), at 2 KiB, 64 KiB and 4 MiB; and 1 MiB of random
bytes (already compressed). For each codec chain: the sealed size over the
plain size, and CPU seconds per MB of plain payload to seal and to open
(``time.process_time``, the best of ``--rounds`` interleaved rounds, each
round every chain on every payload in turn).

**End to end.** ``--jobs`` runs of a job of three steps, each returning
about 2 KiB of such records, on a fresh directory store, without a codec
and with zstd+aes-gcm, interleaved: jobs/s and the bytes the store holds.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import msgpack

from stepstone import AesGcmCodec, Job, JobContext, JobRunner, ZlibCodec, ZstdCodec
from stepstone.records.payloads import PayloadCodec, Payloads

KEY = base64.b64encode(os.urandom(32)).decode()

CHAINS: dict[str, Callable[[], list[PayloadCodec]]] = {
    "zlib-6": lambda: [ZlibCodec(6)],
    "zlib-1": lambda: [ZlibCodec(1)],
    "zstd-3": lambda: [ZstdCodec(3)],
    "zstd-1": lambda: [ZstdCodec(1)],
    "aes-gcm": lambda: [AesGcmCodec({"k1": KEY})],
    "zstd-3+aes-gcm": lambda: [ZstdCodec(3), AesGcmCodec({"k1": KEY})],
}

WORDS = [
    "order",
    "shipped",
    "paid",
    "refund",
    "pending",
    "express",
    "standard",
    "gift",
    "wrap",
    "fragile",
    "warehouse",
    "north",
    "south",
    "east",
    "west",
    "priority",
    "customer",
    "returned",
    "damaged",
]


def records(size: int, seed: int = 7) -> list[dict[str, Any]]:
    """Order records until their JSON passes ``size`` bytes."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    total = 0
    while total < size:
        row = {
            "id": rng.randrange(10**9),
            "uuid": str(uuid.UUID(int=rng.getrandbits(128))),
            "created": f"2026-{rng.randint(1, 12):02}-{rng.randint(1, 28):02}T"
            f"{rng.randint(0, 23):02}:{rng.randint(0, 59):02}:{rng.randint(0, 59):02}Z",
            "customer": {
                "name": f"{rng.choice(['Ada', 'Grace', 'Alan', 'Edsger', 'Barbara'])} "
                f"{rng.choice(['Lovelace', 'Hopper', 'Turing', 'Dijkstra', 'Liskov'])}",
                "email": f"user{rng.randrange(10**6)}@example.com",
                "address": f"{rng.randint(1, 999)} {rng.choice(WORDS).title()} Street",
            },
            "amount": round(rng.uniform(1, 5000), 2),
            "currency": rng.choice(["EUR", "USD", "GBP"]),
            "tags": rng.sample(WORDS, 3),
            "note": " ".join(rng.choices(WORDS, k=rng.randint(4, 12))),
        }
        rows.append(row)
        total += len(json.dumps(row)) + 1
    return rows


def payloads() -> dict[str, bytes]:
    found = {}
    for name, size in (("2KiB", 2048), ("64KiB", 65536), ("4MiB", 4 << 20)):
        rows = records(size)
        found[f"msgpack-{name}"] = msgpack.packb(rows, use_bin_type=True)
        found[f"json-{name}"] = json.dumps(rows, separators=(",", ":")).encode()
    found["random-1MiB"] = random.Random(3).randbytes(1 << 20)
    return found


def measure_codecs(rounds: int, volume: int = 8 << 20) -> list[dict[str, Any]]:
    """Each chain on each payload, sealed and opened about ``volume`` bytes' worth."""
    data = payloads()
    best: dict[tuple[str, str], dict[str, Any]] = {}
    for _ in range(rounds):
        for chain, make in CHAINS.items():
            sealer = Payloads(make())
            for name, plain in data.items():
                repeat = max(1, volume // len(plain))
                start = time.process_time()
                for _ in range(repeat):
                    frame = sealer.seal_bytes(plain)
                sealing = time.process_time() - start
                start = time.process_time()
                for _ in range(repeat):
                    opened = sealer.open_bytes(frame)
                opening = time.process_time() - start
                assert opened == plain
                mb = len(plain) * repeat / 1e6
                row = {
                    "chain": chain,
                    "payload": name,
                    "plain_bytes": len(plain),
                    "sealed_bytes": len(frame),
                    "ratio": round(len(frame) / len(plain), 4),
                    "seal_cpu_ms_per_mb": round(sealing / mb * 1000, 2),
                    "open_cpu_ms_per_mb": round(opening / mb * 1000, 2),
                }
                kept = best.get((chain, name))
                if kept is None or row["seal_cpu_ms_per_mb"] < kept["seal_cpu_ms_per_mb"]:
                    best[(chain, name)] = row
    return list(best.values())


class Orders(Job[int]):
    """Three steps, each returning about 2 KiB of order records."""

    NAME: ClassVar[str] = "bench.orders"
    n: int

    async def run(self, ctx: JobContext) -> int:
        total = 0
        for step in range(3):
            rows = await ctx.step(f"s{step}", records, 2048, self.n * 3 + step)
            total += len(rows)
        return total


def _stored_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


async def one_run(jobs: int, codec: list[PayloadCodec] | None) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="bench-codec-"))
    try:
        async with JobRunner(str(root), jobs=[Orders], codec=codec, concurrency=64) as runner:
            start = time.perf_counter()
            handles = [await runner.submit(Orders(n=n)) for n in range(jobs)]
            for handle in handles:
                await handle.result(timeout=600)
            took = time.perf_counter() - start
        stored = _stored_bytes(root)
        return {"jobs_per_s": round(jobs / took, 1), "stored_bytes": stored}
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def measure_runs(jobs: int, rounds: int) -> list[dict[str, Any]]:
    variants: dict[str, Callable[[], list[PayloadCodec] | None]] = {
        "none": lambda: None,
        "zstd-3+aes-gcm": CHAINS["zstd-3+aes-gcm"],
    }
    rows = []
    for n in range(rounds):
        for name, make in variants.items():
            rows.append({"variant": name, "round": n, "jobs": jobs, **await one_run(jobs, make())})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args()
    codecs = measure_codecs(args.rounds)
    print(f"{'chain':16} {'payload':16} {'ratio':>7} {'seal ms/MB':>11} {'open ms/MB':>11}")
    for row in codecs:
        print(
            f"{row['chain']:16} {row['payload']:16} {row['ratio']:7.3f} "
            f"{row['seal_cpu_ms_per_mb']:11.1f} {row['open_cpu_ms_per_mb']:11.1f}"
        )
    runs = asyncio.run(measure_runs(args.jobs, args.rounds)) if args.jobs else []
    for variant in ("none", "zstd-3+aes-gcm"):
        mine = [r for r in runs if r["variant"] == variant]
        if mine:
            rates = [r["jobs_per_s"] for r in mine]
            print(
                f"end to end, {variant}: {statistics.median(rates)} jobs/s (runs {rates}), "
                f"{mine[0]['stored_bytes']} bytes stored"
            )
    if args.out:
        load = os.getloadavg()
        Path(args.out).write_text(
            json.dumps({"codecs": codecs, "runs": runs, "load": load}, indent=1) + "\n"
        )


if __name__ == "__main__":
    main()
