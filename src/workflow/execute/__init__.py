"""The execute side: one attempt of a run, and how the run's end is recorded.

- ``attempts.py``: the handler the worker calls for each claim: decode the
  envelope, look for an outcome already recorded, admit the attempt under
  its limits, run the job;
- ``context.py``: :class:`JobContext`, what the job's ``run`` sees (steps,
  children, durable waits, progress, the lease), and its blocking twin;
- ``admission.py``: what an attempt asks before the run's code starts (a
  slot of its concurrency key, its rate limit's start) and tells when it
  ends, over :mod:`stepstone.limits`;
- ``scope.py``: one attempt's bookkeeping, shared by the context, the
  waits, the admission and the attempt;
- ``memos.py``: the values a run records (a step's result, a wait's
  decision) and replays on a retry;
- ``durable_waits.py``: sleeps, event waits and awaiting children, which
  suspend the run and hold no worker;
- ``ending.py``: the worker's attempt callbacks: the outcome recorded
  before the ack, the parent woken, the handles told, the hooks run;
- ``hooks.py``: ``on_settled`` hooks, called once an outcome stands;
- ``cancelling.py``: cancelling a run, from any process;
- ``debounced.py``: a debounced run waits for its window, then takes its
  last submit's input.
"""
