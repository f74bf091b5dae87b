"""Stores that stand in for a real one in tests: failing on purpose, or missing a property.

Neither is a backend: each is a store over another store, forwarding every
call to it, so what it promises is the inner store's, less what it takes
away on purpose. Why each exists:

- **The engine's promises must hold when the store misbehaves**
  (``faults``, ``FaultyStore``): it fails calls on purpose, the ways S3 does
  (a request refused, a request applied whose answer is lost, a slow
  request, an outage), over any real store and reproducibly from a seed, for
  the reliability tests.
- **A check must be shown to catch what it checks** (``broken``,
  ``BrokenStore``): it takes away one property the engine needs
  (:data:`stepstone.store.conformance.PROPERTIES`) the way stores and
  gateways lose it, so the tests show ``stepstone check-store`` catches each.

The request counter (:mod:`stepstone.store.counting`) and the retry policy
(:mod:`stepstone.store.retry`) are no doubles: they live beside the stores.
"""

from .broken import BrokenStore
from .faults import FaultyStore

__all__ = ["BrokenStore", "FaultyStore"]
