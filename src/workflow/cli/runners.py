"""The JobRunner a command works on: an application's, or one on a store URL.

``worker`` and ``--app APP:RUNNER`` import the application and take its
runner (or call a zero-argument factory for one), so the worker runs the
application's job types and the inspecting commands see its queue and
prefix. Without ``--app``, a command opens a bare runner on ``--store`` (or
``STEPSTONE_STORE``): inspecting needs no job types.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys
from typing import Any

from stepstone.cli.errors import CliError
from stepstone.records.payload_config import (
    ENV_CODEC,
    ENV_SEAL_ERRORS,
    codecs_from_env,
    seal_errors_from_env,
)
from stepstone.runner import JobRunner
from stepstone.store.errors import StoreConfigError

ENV_STORE = "STEPSTONE_STORE"
ENV_PREFIX = "STEPSTONE_PREFIX"


def load_target(spec: str) -> Any:
    """The object ``module:attr`` names (``attr`` may be dotted), importing
    ``module`` with the current directory on the path, as ``python -m`` would."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CliError(f"expected APP:RUNNER (a module and an attribute), got {spec!r}", 2)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        if getattr(exc, "name", None) and module_name.startswith(str(exc.name)):
            raise CliError(f"cannot import module {module_name!r}: {exc}") from exc
        raise  # the module exists but an import inside it failed: show the traceback
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise CliError(f"module {module_name!r} has no attribute {attr!r}") from None
    return target


async def resolve_runner(spec: str) -> JobRunner:
    """A JobRunner, or the result of calling a zero-argument factory (sync or async)."""
    target = load_target(spec)
    if not isinstance(target, JobRunner) and callable(target):
        try:
            inspect.signature(target).bind()
        except TypeError:
            raise CliError(
                f"{spec} is a callable that needs arguments; it must be a JobRunner "
                "or a zero-argument callable returning one"
            ) from None
        except ValueError:  # no signature to check (a builtin): just call it
            pass
        target = target()
        if inspect.isawaitable(target):
            target = await target
    if not isinstance(target, JobRunner):
        raise CliError(
            f"{spec} is a {type(target).__name__}, not a JobRunner "
            "(or a zero-argument callable returning one)"
        )
    return target


async def runner_from_args(args: argparse.Namespace) -> JobRunner:
    """The runner of ``--app``, else a runner on ``--store`` under ``--prefix``;
    with the payload codecs of ``--codec``, else of ``STEPSTONE_CODEC`` (for
    an application's runner, only when it has none of its own)."""
    return with_codec(await _runner(args), args)


def with_codec(runner: JobRunner, args: argparse.Namespace) -> JobRunner:
    """``runner`` with the payload codecs of ``--codec``, else of
    ``STEPSTONE_CODEC`` when it has none of its own; sealing the error
    texts it writes when ``--seal-errors`` or ``STEPSTONE_SEAL_ERRORS`` asks
    (as it does when it was built so): docs/security.md."""
    spec = getattr(args, "codec", None)
    if spec is not None or (os.environ.get(ENV_CODEC) and not runner.codec):
        try:
            runner.codec = codecs_from_env(spec)
        except (ValueError, ImportError) as exc:
            raise CliError(f"--codec / {ENV_CODEC}: {exc}", 2) from None
    try:
        seal = getattr(args, "seal_errors", False) or seal_errors_from_env()
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    if seal and not runner.seal_errors:
        runner.seal_errors = True
    return runner


def check_sealing(runner: JobRunner) -> None:
    """CliError when ``runner`` is to seal error texts without a codec to
    seal them with (its start would refuse)."""
    if runner.seal_errors and not runner.codec:
        raise CliError(
            f"--seal-errors / {ENV_SEAL_ERRORS}: no payload codec to seal with "
            f"(--codec or {ENV_CODEC})",
            2,
        )


async def _runner(args: argparse.Namespace) -> JobRunner:
    app = getattr(args, "app", None)
    if app:
        return await resolve_runner(app)
    url = getattr(args, "store", None) or os.environ.get(ENV_STORE)
    if not url:
        raise CliError(f"no store: pass --store URL or set {ENV_STORE}", 2)
    prefix = getattr(args, "prefix", None)
    if prefix is None:
        prefix = os.environ.get(ENV_PREFIX, "")
    if url.startswith("memory:"):
        raise CliError(
            "a memory:// store lives inside one process; point the CLI at a "
            "directory, file:// or s3:// store"
        )
    try:
        return JobRunner(url, prefix=prefix)
    except StoreConfigError as exc:
        raise CliError(str(exc)) from None
