"""``python -m workflow``: the same as the ``stepstone`` command."""

from .cli import run

run()
