"""``python -m stepstone``: the same as the ``stepstone`` command."""

from .cli import run

run()
