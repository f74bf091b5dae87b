"""``python -m stepstone``: the same as the ``stepstone`` command."""

from stepstone.cli import run

run()
