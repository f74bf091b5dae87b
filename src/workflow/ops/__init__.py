"""Operator tools: what ``stepstone`` and the web view do with a store.

They read and change the objects the engine writes without knowing any job
type, so an operator's shell, which imports none of the application's code,
can work on any runner's store.

- ``reads.py``: one run in full (``stepstone show``), every record that
  will not decode named instead of failing the command;
- ``run_ids.py``: the run an operator names, by id, id prefix or key;
- ``listing.py``: runs listed newest first (``stepstone ls``) and counted
  (``stepstone stats``);
- ``finished.py``: the outcome listing a long-lived view keeps, listed
  again beside its pages rather than on each;
- ``actions.py``: what changes runs: retry a dead run, cancel, purge;
- ``audited.py``: an operator's action run with its audit record around it;
- ``timeline.py``: a run's steps in the order they ran, across its claims;
- ``durations.py``: ages and times as operators type them (``--since 2h``).
"""
