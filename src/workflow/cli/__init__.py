"""``stepstone``: run workers and look after jobs from a shell.

    stepstone worker APP:RUNNER [--concurrency N]
    stepstone ls [--status S] [--kind JOB_NAME] [--since WHEN] [--limit N]
    stepstone show ID | PREFIX | --key IDEMPOTENCY_KEY
    stepstone retry ID
    stepstone retry --status dead [--kind JOB_NAME] [--since WHEN] [--yes]
    stepstone cancel ID
    stepstone purge --older-than 7d [--dry-run]
    stepstone stats
    stepstone check-store STORE_URL

Every command but ``worker`` reads the store named by ``--store URL`` (or
``STEPSTONE_STORE``) under ``--prefix`` (or ``STEPSTONE_PREFIX``), or the
store, queue and prefix of an application's runner with ``--app APP:RUNNER``.
Those options go before or after the command. Tables are for people (``ls``
fits in 100 columns, newest first); ``--json`` prints one JSON document for
scripts.
A failure prints one line to stderr and exits 1 (2 for a usage mistake, 3
for a bulk action that could not touch every run it chose: ``statuses``).

The commands need none of the application's job types: they read the
records the engine writes (see :mod:`stepstone.ops.reads`), so an operator
can inspect a bucket from any machine that can reach it. docs/operations.md
is the reference.

The modules, in the order a command meets them: ``entry`` (``main``: parse,
dispatch, one line per failure), ``parser`` (the commands and their
options), ``runners`` (the JobRunner a command works on), ``commands`` (the
commands that inspect and operate on jobs), ``worker`` (the worker command
and its signals), ``check_store`` (the conformance check of a store),
``render`` (tables and JSON), ``notices`` (warnings on stderr),
``durations`` (a duration it cannot read is a usage error), ``errors`` and
``statuses`` (the exit statuses).
"""

from stepstone.cli.entry import main, run

__all__ = ["main", "run"]
