"""Records: the objects a run leaves in the store, how they are keyed, and
how long they stay.

- ``layout.py``: every key the workflow layer builds, under the runner's
  prefix, and the checks that keep each one valid on every backend;
- ``codec.py``: how values are stored (MessagePack; canonical JSON for inputs)
  and read back as the types the code declares;
- ``envelope.py``: the payload a job travels in through the queue;
- ``outcome.py``: a run's outcome record, its one durable answer, and the
  tombstone a swept run leaves;
- ``run_records.py``: the outcome and progress records read and written in
  one place (create-if-absent, compare-and-swap);
- ``attempts.py``: the record of one claim of a run (its format);
- ``attempt_log.py``: the one place attempt records are written;
- ``history.py``: a run's claims read back in order;
- ``family.py``: the runs that wait for a run's end, and the children it
  submitted;
- ``retention.py``: the sweep of finished runs past the window (and of
  audit records past theirs);
- ``audit.py``, ``audit_log.py``: the record of an operator's action, and
  where such records are kept, read back and swept;
- ``fit_to_run.py``: whether a store is fit for a worker: reachable,
  holding conditional writes, not a copy;
- ``debounce_windows.py``: a debounce key's windows and the rules that
  decide them (pure);
- ``singleton_runs.py``: a singleton key's live run and the rules that
  decide it (pure);
- ``unreadable.py``: what stands in a listing or a read for a stored object
  that would not decode.
"""
