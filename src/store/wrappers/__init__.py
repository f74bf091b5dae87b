"""What wraps a store or its requests: counted, failing on purpose, retried, paced.

None of these is a backend. Three are stores over another store, forwarding
every call to it, so what they promise is the inner store's; two are what
``S3Store`` wraps each of its requests in. Why each exists, and where it lives:

- **Requests are what S3 bills** (``counting``, ``CountingStore``): it counts
  every call to the contract by kind (GET, HEAD, PUT, conditional PUT, LIST,
  DELETE), so the benchmarks and the tests can report and pin the requests a
  job costs, and a change that adds one to every claim shows up as a number.
- **The engine's promises must hold when the store misbehaves**
  (``faults``, ``FaultyStore``): it fails calls on purpose, the ways S3 does
  (a request refused, a request applied whose answer is lost, a slow
  request, an outage), over any real store and reproducibly from a seed, for
  the reliability tests.
- **A check must be shown to catch what it checks** (``broken``,
  ``BrokenStore``): it takes away one property the engine needs
  (:data:`stepstone.store.conformance.PROPERTIES`) the way stores and
  gateways lose it, so the tests show ``stepstone check-store`` catches each.
- **Short blips are cheaper absorbed than surfaced** (``retry``,
  ``RetryPolicy``): a few quick retries with full jitter inside the store,
  bounded and capped, rather than a failed job step; what is retried is the
  caller's choice, when and how often this policy's.
- **A crowd over a partition's limit must send less, not retry harder**
  (``throttle``, ``AdaptiveRate``, ``AdaptiveRates``, ``process_rates``):
  one send rate per partition of the bucket and class of request, shared by
  every request of the process, lowered by SlowDown and 429 answers and
  raised by successes, so that a fleet of processes each learning on its
  own stays near the partition's limit.
"""

from .broken import BrokenStore
from .counting import CountingStore
from .faults import FaultyStore
from .retry import RetryPolicy
from .send_rate import AdaptiveRate
from .throttle import AdaptiveRates, process_rates

__all__ = [
    "AdaptiveRate",
    "AdaptiveRates",
    "process_rates",
    "BrokenStore",
    "CountingStore",
    "FaultyStore",
    "RetryPolicy",
]
