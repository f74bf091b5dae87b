"""Fleet-wide limits on a job type: concurrency keys and rate limits.

Both are kept in the bucket, as small objects every worker process updates
by compare-and-swap; nothing else is needed. A run that may not start yet
suspends (holding no worker, spending no attempt) and is woken or comes due
when it may. One module per part:

- :mod:`~stepstone.limits.slots`: the slots of one concurrency key (pure);
- :mod:`~stepstone.limits.rate`: :class:`RateLimit` and the starts it gives (pure);
- :mod:`~stepstone.limits.shared`: one object updated by compare-and-swap,
  many updates of one process in one write.

What an attempt asks of them before a run's code starts, and tells when it
ends, is :mod:`stepstone.execute.admission`: it keeps its starts as memos of
the run, so it is part of executing an attempt, above the job types that
declare the limits.
"""
