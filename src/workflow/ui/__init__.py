"""``stepstone ui``: a read-only web view of a store's runs, in the browser.

A list of runs (newest first, filtered by state, job type and age) with the
queue's counts by state, and a page per run: its input, steps in the order
they were recorded with their durations, attempts with their errors, progress
and outcome. Pages refresh themselves. Everything is read through
:mod:`stepstone.ops.reads`, as ``stepstone ls`` and ``show`` read it.

- :mod:`.server`: uvicorn on a bound socket, the runner on its loop;
- :mod:`.app`: the Starlette application and its Jinja2 templates;
- :mod:`.routes`: the pages;
- :mod:`.present`: what the pages show, made from the operator tools' reads (:mod:`stepstone.ops`).

Needs the ``ui`` extra (starlette, uvicorn, jinja2); importing this package
does not, so the CLI starts without it and says what to install.
"""
