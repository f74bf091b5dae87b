"""``stepstone check-store URL``: qualify a store before trusting it with jobs.

It runs :func:`stepstone.store.conformance.check_store` on the store the URL
names (a bucket, a directory, ``memory://``) and prints one line per
property, PASS or FAIL with what was seen, then each operation's latency;
exit status 0 when every property holds, 1 with what to do about each one
that does not. It writes only under a scratch prefix
(``stepstone-check-store/...``) and removes it, so it can run against a
bucket in use.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from pathlib import Path

from stepstone.cli.errors import CliError
from stepstone.cli.render import emit_json, table
from stepstone.cli.runners import ENV_STORE
from stepstone.store import FileStore, open_store
from stepstone.store.conformance import (
    OBJECT_LIMIT_REMEDY,
    SCRATCH,
    CheckReport,
    CheckSettings,
    check_store,
)
from stepstone.telemetry.escaping import escape_controls


def cmd_check_store(args: argparse.Namespace) -> int:
    url = args.store_url or getattr(args, "store", None) or os.environ.get(ENV_STORE)
    if not url:
        raise CliError(f"no store: pass STORE_URL, --store URL or set {ENV_STORE}", 2)
    if args.large_mib <= 0 or args.samples <= 0 or args.time_limit <= 0:
        raise CliError("--large-mib, --samples and --time-limit must be positive", 2)
    settings = CheckSettings(
        large_bytes=int(args.large_mib * 1024 * 1024),
        samples=args.samples,
        time_limit=args.time_limit,
    )

    async def run() -> CheckReport:
        store = open_store(url)
        try:
            return await check_store(store, settings)
        finally:
            await store.close()
            if isinstance(store, FileStore):
                _remove_empty_directories(Path(store.root) / SCRATCH)

    report = asyncio.run(run())
    if args.json:
        emit_json(_as_json(report))
    else:
        _print(report)
    return 0 if report.passed else 1


def _remove_empty_directories(top: Path) -> None:
    """A FileStore keeps the directories of the keys it removed; the scratch's go too."""
    for path, _, _ in os.walk(top, topdown=False):
        with contextlib.suppress(OSError):  # not empty: something else lives there
            os.rmdir(path)


def _print(report: CheckReport) -> None:
    out = sys.stdout
    out.write(f"checking {escape_controls(report.location)} under {report.scratch}\n")
    table(
        out,
        ["", "property", "what was seen"],
        [["PASS" if v.passed else "FAIL", v.name, v.detail] for v in report.verdicts],
    )
    if report.one_object:
        out.write(f"\nwrites to one object: {escape_controls(report.one_object)}\n")
    if report.provider:
        out.write("\nhow this provider does it (the store works with each):\n")
        for note in report.provider:
            out.write(f"- {escape_controls(note)}\n")
    if report.latencies:
        out.write("\nlatency, one call at a time:\n")
        table(
            out,
            ["operation", "calls", "p50 ms", "p99 ms"],
            [
                [lat.operation, str(lat.samples), f"{lat.p50 * 1e3:.1f}", f"{lat.p99 * 1e3:.1f}"]
                for lat in report.latencies
            ],
        )
    if report.unmeasured:
        out.write(f"\nlatency not measured: {escape_controls(report.unmeasured)}\n")
    if report.leftover:
        out.write(f"\nwarning: {escape_controls(report.leftover)}: remove them by hand\n")
    failed = [v for v in report.verdicts if not v.passed]
    if failed:
        out.write("\nthis store lacks what stepstone needs; what to do:\n")
        for verdict in failed:
            out.write(f"- {verdict.name}: {verdict.remedy}\n")
    else:
        out.write("\nevery property stepstone needs holds on this store\n")
    if report.object_limited:
        out.write(f"this store limits the writes to one object: {OBJECT_LIMIT_REMEDY}\n")


def _as_json(report: CheckReport) -> dict[str, object]:
    return {
        "store": report.location,
        "scratch": report.scratch,
        "passed": report.passed,
        "properties": [
            {"name": v.name, "passed": v.passed, "detail": v.detail, "remedy": v.remedy}
            for v in report.verdicts
        ],
        "latency": [
            {"operation": lat.operation, "calls": lat.samples, "p50": lat.p50, "p99": lat.p99}
            for lat in report.latencies
        ],
        "unmeasured": report.unmeasured,
        "one_object": report.one_object,
        "provider": report.provider,
        "object_limited": report.object_limited,
        "leftover": report.leftover,
    }
