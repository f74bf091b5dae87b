"""``stepstone worker``: run an application's runner until a signal, then drain.

The first SIGTERM or SIGINT stops claiming and lets in-flight jobs finish
within the runner's drain window, which is what a deploy or a Ctrl-C wants;
a second one exits at once, as a crash would, for an operator who cannot
wait. Logs go to stderr, as text or JSON lines.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal

from ..observability import configure_logging
from .errors import CliError
from .runners import resolve_runner

log = logging.getLogger("stepstone.cli")


def cmd_worker(args: argparse.Namespace) -> int:
    root = logging.getLogger()
    level = root.level
    handler = configure_logging(args.log_level, json_lines=args.log_format == "json")
    try:
        return asyncio.run(_serve(args))
    finally:  # as it was: main() is also called in-process (tests, embedding)
        root.removeHandler(handler)
        root.setLevel(level)


async def _serve(args: argparse.Namespace) -> int:
    """Run the runner until SIGTERM or SIGINT, then drain.

    The first signal stops claiming and lets in-flight jobs finish within the
    runner's drain window (what is cut short goes back to the queue, its
    attempt not counted). A second signal exits at once, as a crash would:
    the leases of jobs still running expire and another worker takes them.
    """
    runner = await resolve_runner(args.app)
    if args.concurrency is not None:
        if args.concurrency < 1:
            raise CliError("--concurrency must be at least 1", 2)
        runner.worker.concurrency = args.concurrency
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig.name)
        if len(received) == 1:
            log.info("%s received: draining in-flight jobs (send again to exit at once)", sig.name)
            stop.set()
        else:
            log.warning("%s received again: exiting without draining", sig.name)
            os._exit(128 + sig.value)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        async with runner:
            log.info(
                "worker running %s on %s (concurrency %d); SIGTERM or Ctrl-C drains",
                args.app,
                runner.store.location,
                runner.worker.concurrency,
            )
            await stop.wait()
        log.info("worker drained and stopped")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await runner.close()
    return 0
