"""The S3Store and everything that is S3's own, in one place.

Nothing outside this package needs to know how S3 answers, paces or fails:
the engine sees only the store contract (:mod:`stepstone.store.base`). Why
each module exists:

- ``store`` (``S3Store``): the contract on an S3-compatible bucket over
  aiobotocore's async client; conditional writes are S3's own, errors are
  classified once there.
- ``answers``: S3's error codes by what each asks of a client (send less,
  try again, fix the configuration), and the fields an answer must hold;
  ``classify``: every failure as the contract's error, in one place.
- ``dialect``: what a provider does with S3's conditions (etags in quotes
  or not, DeleteObject's If-Match, a multipart completion's condition),
  learned from its answers; ``probes``: what cannot be seen in an answer,
  tried once on a scratch key; ``husks``: write tokens, and fenced deletes
  where DeleteObject ignores If-Match.
- ``conflicts``: a conditional write that met another one (409) is a race
  to decide by a re-read, under a budget of its own, not an outage.
- ``large``: large bodies streamed, or written in parts, and read into one
  allocation; when a conditional write may go in parts.
- ``sessions``: one botocore session per profile, shared by the process.
- The request pacing: ``send_rate`` (``AdaptiveRate``: how a send rate moves
  on SlowDown and on successes), ``hot_objects`` (single objects whose
  writes are refused, each given a rate of its own), ``object_turns`` (a
  hot object's writes, each process taking turns) and ``throttle``
  (``AdaptiveRates``: a process's rates to one bucket, per partition and
  class, shared by every store of the process).
"""

from .large import Multipart
from .send_rate import AdaptiveRate
from .store import S3Store
from .throttle import AdaptiveRates, process_rates

__all__ = ["AdaptiveRate", "AdaptiveRates", "Multipart", "S3Store", "process_rates"]
