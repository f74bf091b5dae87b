"""The worker: claims jobs from a LeaseQueue, runs their handlers, settles them.

:class:`Worker` is what callers use (``stepstone.runtime.worker.Worker``);
the mechanisms it is made of have a module each, named for what it does and
why it is apart:

- ``worker``: the :class:`Worker` class, its configuration and lifecycle,
  and the loop whose rounds fill and sleep (and what *when* means:
  the injected clock for job time, real seconds for this process's own).
- ``lease``: what a handler sees, its :class:`Lease` on the job and the
  :class:`Attempt` it runs.
- ``handlers``: the handlers registered by kind, and how each is called.
- ``threads``: :class:`JobThreads`, the pool synchronous job code runs in,
  one thread per unit of capacity (the default executor's would cap it).
- ``callbacks``: :class:`AttemptCallbacks`, the layer above's part in each
  attempt, given at construction.
- ``in_flight``: the record of each claimed job and the counts of them, by
  run id and kind, that every other part works on.
- ``heartbeats``: lease renewals, attempt timeouts and cancellation checks of what
  is in flight, each a task of its own so the loop never waits on the queue.
- ``claims``: filling free capacity by claiming, within per-kind caps, and
  how long the loop may sleep; queue errors pause claiming.
- ``hand_off``: when a job submitted in this process may go straight to the
  worker without passing over one that waits in the queue.
- ``attempts``: one claimed job's task, from its handler to how it ended and
  who hears of it.
- ``settle``: carrying out the decision on the queue, ``on_terminal`` first
  for a terminal one, fenced by the claim's token, and counting what the
  queue did.
- ``drain``: the graceful stop, a window for handlers in flight, then their
  jobs released uncounted.
- ``pauses``: the loop's sleep anything can cut short, and the pause after
  queue errors.
- ``identity``: the worker's id across restarts, held by a lock on its
  host, so a restart takes back its own runs and two live workers cannot
  share one.
- ``presence``: the worker's record in the store (id, host, pid, capacity,
  runs held, last beat), which operators' tools read to see the fleet; a
  clean stop marks it, a dead worker's shows as gone, old ones are swept.
- ``logs``: the worker's logger and a job's line with its run id, kind and
  attempt.
- ``stats``: :class:`WorkerStats`, the counters.
"""

from ..backoff import Backoff
from ..decision import Failure, FailureKind, Success, Terminal
from .callbacks import AttemptCallbacks, OnTerminal
from .handlers import Handler
from .lease import Attempt, Lease
from .stats import WorkerStats
from .threads import JobThreads
from .worker import Worker

__all__ = [
    "Attempt",
    "AttemptCallbacks",
    "Backoff",
    "Failure",
    "FailureKind",
    "Handler",
    "JobThreads",
    "Lease",
    "OnTerminal",
    "Success",
    "Terminal",
    "Worker",
    "WorkerStats",
]
