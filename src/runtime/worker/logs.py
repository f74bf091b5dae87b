"""The worker's log: one logger, ``stepstone.runtime.worker``, and a line
about one job that says which worker, which run, which kind and attempt
(``attempt 1/3``, and ``2 lapsed`` when workers died or hung under it).

A job's line carries ``run_id``, ``kind`` and ``attempt`` as record
attributes (``extra``), so a log pipeline can index them
(:class:`stepstone.telemetry.JobLogFilter` maps them to its own names).
"""

from __future__ import annotations

import logging
from typing import Any

from ..queue import Delivery
from .identity import WorkerIdentity

logger = logging.getLogger("stepstone.runtime.worker")


def where(delivery: Delivery) -> str:
    d = delivery
    lapsed = f", {d.lapses} lapsed" if d.lapses else ""
    return f"job {d.id} (kind {d.kind!r}, attempt {d.attempt}/{d.max_attempts}{lapsed})"


def extra(delivery: Delivery) -> dict[str, object]:
    return {"run_id": delivery.id, "kind": delivery.kind, "attempt": delivery.attempt}


class JobLog:
    """Lines about the jobs of the worker ``identity``."""

    def __init__(self, identity: WorkerIdentity) -> None:
        self._identity = identity

    @property
    def worker_id(self) -> str:
        return self._identity.id

    def __call__(
        self,
        delivery: Delivery,
        level: int,
        message: str,
        *args: Any,
        exc_info: bool | BaseException | None = False,
    ) -> None:
        if not logger.isEnabledFor(level):
            return  # skip building the prefix and extra: twice per job at DEBUG
        logger.log(
            level,
            "%s: %s: " + message,
            self.worker_id,
            where(delivery),
            *args,
            exc_info=exc_info,
            extra=extra(delivery),
        )
