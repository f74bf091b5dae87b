"""``stepstone ui``: a web view of a store's runs, in the browser, that a team can share.

A list of runs (newest first, filtered by state, job type and age) with the
queue's counts by state, and a page per run: its input, steps in the order
they were recorded with their durations, attempts with their errors, progress
and outcome. Pages refresh themselves. Everything is read through
:mod:`stepstone.ops.reads`, as ``stepstone ls`` and ``show`` read it.

- :mod:`.server`: uvicorn on a bound socket, the runner on its loop;
- :mod:`.app`: the Starlette application and its Jinja2 templates;
- :mod:`.routes`: the pages;
- :mod:`.present`: what the pages show, made from the operator tools' reads (:mod:`stepstone.ops`);
- :mod:`.acting`: the actions (retry, cancel, replay, send an event), for operators, audited;
- :mod:`.guard`: the Host names it answers, how it knows its visitors (``Access``), CSRF;
- :mod:`.access`: each request's visitor (password, trusted proxy, or nobody signed in);
- :mod:`.signin`, :mod:`.sessions`, :mod:`.users`, :mod:`.passwords`: signing in, the
  session cookie, the users file and its scrypt hashes.

Needs the ``ui`` extra (starlette, uvicorn, jinja2); importing this package
does not, so the CLI starts without it and says what to install.
"""
