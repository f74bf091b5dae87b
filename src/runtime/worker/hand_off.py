"""When a job submitted in this process may go straight to its worker.

A submit in the worker's own process can write the job's record already
claimed for this worker (``ClaimedEnqueue.enqueue_claimed``): one write where an
enqueue and a claim take two, and no wait for the next claim. The worker
takes it (``Worker.take``) only when that passes over nothing: it runs on
the submitter's event loop, is not stopping, has free capacity and room
under the kind's cap, and its last claim found nothing more to take with no
work heard of since, so no job waiting in the queue is passed over for the
capacity. A claim under way may not count on the kind's room: a capped kind
waits for it.
"""

from __future__ import annotations

from collections.abc import Mapping

from .claims import ClaimLoop
from .handlers import Registration
from .in_flight import InFlight


def may_take(
    kind: str,
    *,
    open_here: bool,
    claims: ClaimLoop,
    handlers: Mapping[str, Registration],
    jobs: InFlight,
    capacity: int,
) -> bool:
    """Whether a job of ``kind`` may be handed over now (see the module
    docstring); ``open_here``: the worker runs, on the caller's event loop,
    and is not stopping."""
    registration = handlers.get(kind)
    if not (open_here and claims.drained and registration is not None and len(jobs) < capacity):
        return False
    cap = registration.max_in_flight
    return cap is None or (not claims.claiming and jobs.of_kind(kind) < cap)
