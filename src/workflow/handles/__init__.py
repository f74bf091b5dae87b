"""Handles: a submitted run's id, and the ways to learn how it ended.

- ``handle.py``: :class:`JobHandle`, what ``submit`` returns, and the
  :class:`Answers` it asks;
- ``answers.py``: what answers those questions, from the run's records,
  its queue record and the outcome watch;
- ``watch.py``: the outcome watch, which wakes handles the moment this
  process's worker records an outcome and polls for everyone else's;
- ``poll_timing.py``: when a process with no worker polls, timed by how
  long its kind's runs took;
- ``state.py``: :class:`JobState`, where a run is now;
- ``sync.py``: :class:`SyncHandle` and the blocking calls for code without
  an event loop.
"""
