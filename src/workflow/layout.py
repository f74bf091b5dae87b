"""Where the workflow layer keeps its objects in the store.

```
outcomes/<run_id>                            the outcome record (create-if-absent)
memos/<run_id>/<incarnation>/<step>          one memoized step (create-if-absent)
progress/<run_id>                            the last progress value a run reported
events/<run_id>/<incarnation>/<name>/<seq>   one event sent to a run (create-if-absent)
schedules/<name>                             the last tick a schedule submitted
```

Run ids are hex digests or hex tokens and incarnations are hex tokens, so
the only user text in a key is a step, event or schedule name, which is
percent-encoded. A wait's own memos (``!sleep@1``, ``!event.approval@1``)
start with ``!``, which percent-encoding never leaves in a step name, so
they cannot collide with a step's.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from urllib.parse import quote, unquote

from stepstone.store.keys import join

from .errors import InvalidJobId

_HEX_ID = re.compile(r"^[0-9a-f]{8,64}$")
MAX_STEP_NAME = 200


def run_id_for_key(idempotency_key: str) -> str:
    """The run id of a keyed job: the hex SHA-256 of its key."""
    return hashlib.sha256(idempotency_key.encode()).hexdigest()


def fresh_run_id() -> str:
    return secrets.token_hex(16)


def fresh_incarnation() -> str:
    return secrets.token_hex(8)


def check_run_id(run_id: object) -> str:
    """``run_id`` if it is a job id; raises InvalidJobId before anything is read."""
    if not isinstance(run_id, str) or not _HEX_ID.match(run_id):
        shown = repr(run_id if not isinstance(run_id, str) else run_id[:80])
        raise InvalidJobId(f"not a job id: {shown} (expected 8 to 64 lowercase hex digits)")
    return run_id


class Layout:
    """Key builders under one prefix (the runner's ``prefix``, often empty)."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix.strip("/")
        # Built once: keys are built several times per job, and join's
        # generator costs more than the rest of building one.
        self._outcomes = join(self.prefix, "outcomes") + "/"
        self._memos = join(self.prefix, "memos") + "/"

    def outcome(self, run_id: str) -> str:
        if _plain(run_id):
            return self._outcomes + run_id
        return join(self.prefix, "outcomes", run_id)

    def outcomes(self) -> str:
        return join(self.prefix, "outcomes") + "/"

    def memos(self, run_id: str, incarnation: str | None = None) -> str:
        return join(self.prefix, "memos", run_id, incarnation or "") + "/"

    def memo(self, run_id: str, incarnation: str, step_key: str) -> str:
        if _plain(run_id) and _plain(incarnation) and _plain(step_key):
            return f"{self._memos}{run_id}/{incarnation}/{step_key}"
        return join(self.prefix, "memos", run_id, incarnation, step_key)

    def progress(self, run_id: str) -> str:
        return join(self.prefix, "progress", run_id)

    def events(self, run_id: str, incarnation: str | None = None, name: str | None = None) -> str:
        """The prefix of a run's events (of one incarnation, of one name)."""
        parts = [incarnation or ""] + ([name_key(name)] if name is not None else [])
        return join(self.prefix, "events", run_id, *parts) + "/"

    def event(self, run_id: str, incarnation: str, name: str, seq: str) -> str:
        return join(self.prefix, "events", run_id, incarnation, name_key(name), seq)

    def schedule(self, name: str) -> str:
        return join(self.prefix, "schedules", name_key(name))

    def run_id_of_outcome(self, key: str) -> str:
        return key.rsplit("/", 1)[-1]


def _plain(part: str) -> bool:
    """A part that ``join`` would keep as it is: non-empty, no '/' at either end."""
    return bool(part) and part[0] != "/" and part[-1] != "/"


def step_key(name: str, occurrence: int) -> str:
    """The key segment of a step: its name percent-encoded, and ``@n`` for the
    n-th call of one name in a run (n > 1). ``@`` is always encoded in names,
    so a suffix never collides with a name."""
    if not isinstance(name, str) or not name:
        raise ValueError("a step name must be a non-empty str")
    if len(name) > MAX_STEP_NAME:
        raise ValueError(
            f"a step name must be at most {MAX_STEP_NAME} characters: {name[:40]!r}..."
        )
    encoded = quote(name, safe="")
    if encoded in (".", ".."):
        encoded = encoded.replace(".", "%2E")
    return encoded if occurrence == 1 else f"{encoded}@{occurrence}"


def name_key(name: str) -> str:
    """An event's or schedule's name as one key segment (percent-encoded)."""
    return step_key(name, 1)


def step_name(key: str) -> str:
    """The readable name of a step key (``charge@2`` -> ``charge #2``)."""
    base, _, n = key.partition("@")
    return unquote(base) + (f" #{n}" if n else "")
