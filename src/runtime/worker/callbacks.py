"""What the worker asks of the layer above it about each attempt: one
protocol, given to the worker when it is built (:class:`AttemptCallbacks`).

The runtime knows nothing of outcome records or attempt histories; the
workflow layer does, and it hears of each attempt through these three. A
worker without them (tests, the runtime used alone) settles every attempt as
decided and checks for cancellations only through its heartbeats.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from ..decision import Terminal
from ..observer import AttemptReport
from ..queue import Delivery

OnTerminal = Callable[[Delivery, Terminal], Awaitable[None]]
"""The shape of :meth:`AttemptCallbacks.on_terminal`."""


class AttemptCallbacks(Protocol):
    """The workflow layer's part in each attempt (see the module docstring)."""

    async def on_terminal(self, delivery: Delivery, terminal: Terminal) -> None:
        """Called with a job's final result before the queue forgets it (the
        workflow layer writes the run's outcome record here). If it raises
        StoreUnavailable, the job is not settled and runs again later,
        uncounted; if it raises anything else, the job is dead-lettered with
        the error in its reason."""
        ...

    async def is_cancelled(self, delivery: Delivery) -> bool:
        """Asked about an attempt that has run a while (every ``cancel_check``
        seconds), and about one whose lease turned out gone: was its job
        cancelled meanwhile? What it raises counts as no."""
        ...

    async def attempt_over(self, report: AttemptReport) -> None:
        """Awaited with each attempt's report once it is settled, before its
        capacity frees (the attempt history writes there); what it raises is
        logged."""
        ...
