"""``stepstone worker``: run an application's runner until a signal, then drain.

The first SIGTERM or SIGINT stops claiming and lets in-flight jobs finish
within the runner's drain window, which is what a deploy or a Ctrl-C wants;
a second one exits at once, as a crash would, for an operator who cannot
wait. Logs go to stderr, as text or JSON lines. With ``--metrics-port`` it
also serves its metrics in the Prometheus text format (stepstone.telemetry.prometheus).

Before it claims anything the worker reads its store once
(:meth:`JobRunner.check_store`): a bucket that does not exist, refused
credentials, a malformed URL or an endpoint that cannot be reached ends the
command at once with one line and exit status 1, so a supervisor sees a
failed start instead of a process that retries forever. An outage after a
good start is ridden out: the worker logs one line per retry and backs off.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from typing import Any

from stepstone.cli.errors import CliError
from stepstone.cli.runners import check_sealing, resolve_runner, with_codec
from stepstone.errors import WorkerIdInUse
from stepstone.runner import JobRunner
from stepstone.store import StoreError
from stepstone.telemetry.logs import configure_logging
from stepstone.telemetry.prometheus import MetricsUnavailable, serve_prometheus

log = logging.getLogger("stepstone.cli")


def cmd_worker(args: argparse.Namespace) -> int:
    args.app = _target(args)
    root = logging.getLogger()
    level = root.level
    handler = configure_logging(args.log_level, json_lines=args.log_format == "json")
    try:
        return asyncio.run(_serve(args))
    finally:  # as it was: main() is also called in-process (tests, embedding)
        root.removeHandler(handler)
        root.setLevel(level)


def _target(args: argparse.Namespace) -> str:
    """APP:RUNNER, given after the command or as ``--app`` (before or after it).
    The options that choose a store for the other commands do not apply: the
    worker runs on its runner's store."""
    given = getattr(args, "app", None)
    if args.target and given and args.target != given:
        raise CliError(f"worker: two runners given, {args.target} and --app {given}", 2)
    for option in ("store", "prefix"):
        if getattr(args, option, None) is not None:
            raise CliError(
                f"worker runs on the store and prefix of its runner; --{option} does not apply", 2
            )
    if args.json:
        raise CliError("worker: --json is for the commands that print; use --log-format json", 2)
    target: str | None = args.target or given
    if not target:
        raise CliError("worker needs APP:RUNNER (or --app APP:RUNNER)", 2)
    return target


def on_unretrieved(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The worker's loop exception handler: a connection lost inside a task
    nobody awaits (an HTTP client's own write, dropped in an outage) is one
    log line, no traceback, as every other retry of an outage is; anything
    else goes to asyncio's default handler."""
    error = context.get("exception")
    if isinstance(error, ConnectionError):
        log.warning("a connection was lost (%s: %s)", type(error).__name__, error)
        return
    loop.default_exception_handler(context)


async def _serve(args: argparse.Namespace) -> int:
    """Load the runner, check its store, run it until a signal; close it whatever happens."""
    asyncio.get_running_loop().set_exception_handler(on_unretrieved)
    if args.metrics_port is not None:
        _serve_metrics(args.metrics_host, args.metrics_port)
    runner = with_codec(await resolve_runner(args.app), args)
    try:
        check_sealing(runner)
        if args.worker_id is not None:
            try:
                runner.worker.worker_id = args.worker_id
            except ValueError as exc:
                raise CliError(f"--worker-id: {exc}", 2) from None
        if args.build_id is not None:
            try:
                runner.build_id = args.build_id
            except ValueError as exc:
                raise CliError(f"--build-id: {exc}", 2) from None
        if args.concurrency is not None:
            if args.concurrency < 1:
                raise CliError("--concurrency must be at least 1", 2)
            runner.worker.concurrency = args.concurrency
        try:
            await runner.check_store()
        except StoreError as exc:
            raise CliError(f"the worker cannot use its store: {exc}") from None
        try:
            return await _run_until_signalled(runner, args.app)
        except WorkerIdInUse as exc:
            raise CliError(f"the worker cannot start: {exc}") from None
    finally:
        await runner.close()


async def _run_until_signalled(runner: JobRunner, app: str) -> int:
    """Run the runner until SIGTERM or SIGINT, then drain.

    The first signal stops claiming and lets in-flight jobs finish within the
    runner's drain window (what is cut short goes back to the queue, its
    attempt not counted). A second signal exits at once, as a crash would:
    the leases of jobs still running expire and another worker takes them.
    """
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
                app,
                runner.store.location,
                runner.worker.concurrency,
            )
            await stop.wait()
        log.info("worker drained and stopped")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return 0


def _serve_metrics(host: str, port: int) -> None:
    """Serve /metrics before the runner starts (it picks up metrics as it starts)."""
    if not 0 <= port <= 65535:
        raise CliError(f"--metrics-port must be a port number, got {port}", 2)
    try:
        bound_host, bound_port = serve_prometheus(port, host)
    except MetricsUnavailable as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
    log.info("metrics on http://%s:%d/metrics", bound_host, bound_port)
