"""The submit side: a job into the queue, once per idempotency key.

- ``submitter.py``: the keyed-submit protocol (look, create, look again,
  join or take back), the heart of "one run per key";
- ``submission.py``: a job checked and encoded once, before anything is written;
- ``options.py``: :class:`SubmitOptions`, what a caller may set per submit;
- ``look_first.py``: whether a keyed submit looks for an outcome before it
  creates a record (a store billed per request skips the look for new keys);
- ``created_here.py``: keyed runs created and checked here, so this
  process's worker need not look for their outcome again;
- ``hand_off.py``: a job written claimed for this process's worker when it
  is ready for it;
- ``loop_yields.py``: a loop of awaited submits yields to the event loop;
- ``many.py``: ``submit_many``, the same answers for a batch in fewer requests;
- ``events.py``: ``send_event``, an event delivered to a live run;
- ``debouncing.py``: debounced submits, one run for the submits of a key
  within ``wait`` of each other;
- ``singletons.py``: submits of a singleton key: start, join, replace or
  skip its live run.
"""

from stepstone.submit.options import SubmitOptions

__all__ = ["SubmitOptions"]
