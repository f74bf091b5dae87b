"""Where the workflow layer keeps its objects in the store.

```
outcomes/<run_id>                            the outcome record (create-if-absent)
memos/<run_id>/<incarnation>/#<place>        one call of the run's history (create-if-absent)
progress/<run_id>/<incarnation>              the last progress a run reported (compare-and-swap)
events/<run_id>/<incarnation>/<name>/<seq>   one event sent to a run (create-if-absent)
events/<run_id>/<incarnation>/!sent/<digest> the event a keyed send sent (create-if-absent)
streams/<run_id>/<incarnation>/<name>/<offset> one item of a run's stream (create-if-absent)
callbacks/<run_id>/<incarnation>/<place>     a callback's completion, until the run takes it
attempts/<run_id>/<incarnation>/<claim>      how one claim of a run ended (create-if-absent)
waiters/<run_id>                             the runs that joined a run and wait for its end
children/<run_id>/<child>                    a child a run submitted (create-if-absent)
schedules/<name>                             the last tick a schedule submitted
slots/<digest>                               a concurrency key's holders and waiters
rates/<digest>                               a rate limit's state
debounce/<digest>                            a debounce key's windows: their runs and last inputs
singletons/<digest>                          a singleton key's live run
workers/<holder digest>/<life>               a worker's record: who, where, holding what, last beat
audit/<date>/<time>-<random>                 an operator's action: who, when, what, how it ended
audit-runs/<run_id>/<date>T<time>-<random>   the same action's mark under each run it acted on
stepstone-copy                               a copy's mark, put by hand: no worker starts there
```

Run ids are hex digests or hex tokens and incarnations are hex tokens, so
the only user text in a key is a step, event or schedule name, which is
percent-encoded. A memo of the run's history (a step, a sleep, an event
take, a child submit) is keyed by its place in the run, ``#00000003`` for
the third call of the run's own task and ``#b2.1-00000003`` for the third
of a branch (:func:`position_key`), and names its call in its record; memos written
before positions existed are keyed by the step's name (``charge``,
``charge@2``) and a wait's own memos by theirs (``!sleep@1``,
``!event.approval@1``, still so for memos outside the history, such as a
rate limit's start). ``#`` and ``!`` are characters percent-encoding never
leaves in a step name, so none of these can collide with a step's. Every
key fits every backend, whatever the name: a name's key segment is at most 255 bytes (a filesystem's
NAME_MAX; a longer name keeps a readable head and a hash of the whole), and
a runner whose prefix would leave its longest key past the store's
``key_limit`` (1,024 bytes on S3, less the bucket prefix) is refused when it
is built. So a step's memo write can never be refused for its key after its
function has run. A concurrency, rate or debounce key is user text too, and is hashed
with the job type's NAME into ``<digest>`` (:func:`limit_digest`).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from urllib.parse import quote, unquote

from stepstone.errors import InvalidRunId
from stepstone.store.keys import MAX_KEY_LENGTH, MAX_SEGMENT_LENGTH, join

_HEX_ID = re.compile(r"^[0-9a-f]{8,64}$")

MAX_RUN_ID = 64
INCARNATION_LENGTH = 16
HASHED = "@~"
"""Between a long step name's head and the hash of the whole name. ``@`` is
always percent-encoded in a name, so no name's segment can look hashed."""
HASH_LENGTH = 32


def run_id_for_key(idempotency_key: str) -> str:
    """The run id of a keyed job: the hex SHA-256 of its key."""
    return hashlib.sha256(idempotency_key.encode()).hexdigest()


def limit_digest(kind: str, key: str | None) -> str:
    """The object name of a job type's concurrency or rate key (None: the
    type as a whole): hex SHA-256, so any key text makes a safe name."""
    text = kind if key is None else f"{kind}\0{key}"
    return hashlib.sha256(text.encode()).hexdigest()


def fresh_run_id() -> str:
    return secrets.token_hex(16)


def fresh_incarnation() -> str:
    return secrets.token_hex(INCARNATION_LENGTH // 2)


def check_run_id(run_id: object) -> str:
    """``run_id`` if it is a run id; raises InvalidRunId before anything is read."""
    if not isinstance(run_id, str) or not _HEX_ID.match(run_id):
        shown = repr(run_id if not isinstance(run_id, str) else run_id[:80])
        raise InvalidRunId(f"not a run id: {shown} (expected 8 to 64 lowercase hex digits)")
    return run_id


class Layout:
    """Key builders under one prefix (the runner's ``prefix``, often empty)."""

    def __init__(self, prefix: str = "", *, key_limit: int = MAX_KEY_LENGTH) -> None:
        """``key_limit``: the longest key the store takes; a prefix that
        leaves the longest memo key past it raises ValueError."""
        self.prefix = prefix.strip("/")
        # Built once: keys are built several times per job, and join's
        # generator costs more than the rest of building one.
        self._outcomes = join(self.prefix, "outcomes") + "/"
        self._memos = join(self.prefix, "memos") + "/"
        # The longest key built here: an event's, its name's segment full.
        run_id, incarnation = "0" * MAX_RUN_ID, "0" * INCARNATION_LENGTH
        longest = self.event(run_id, incarnation, "x" * MAX_SEGMENT_LENGTH, event_seq(0.0))
        if len(longest.encode()) > key_limit:
            raise ValueError(
                f"prefix {self.prefix[:40]!r} is too long for the store: a key could take "
                f"{len(longest.encode())} bytes, and the store takes keys of up to {key_limit}"
            )

    def queue(self) -> str:
        """The prefix of the runner's default queue, a StoreQueue (``queue/jobs/<run_id>``)."""
        return join(self.prefix, "queue")

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

    def progress(self, run_id: str, incarnation: str) -> str:
        return join(self.prefix, "progress", run_id, incarnation)

    def progresses(self, run_id: str) -> str:
        """The prefix of the progress records of every incarnation of a run."""
        return join(self.prefix, "progress", run_id) + "/"

    def events(self, run_id: str, incarnation: str | None = None, name: str | None = None) -> str:
        """The prefix of a run's events (of one incarnation, of one name)."""
        parts = [incarnation or ""] + ([name_key(name)] if name is not None else [])
        return join(self.prefix, "events", run_id, *parts) + "/"

    def event(self, run_id: str, incarnation: str, name: str, seq: str) -> str:
        return join(self.prefix, "events", run_id, incarnation, name_key(name), seq)

    def event_sent(self, run_id: str, incarnation: str, digest: str) -> str:
        """Where a keyed send records the event it sent (``digest``: of its
        name and key); ``!`` never starts an event name's segment."""
        return join(self.prefix, "events", run_id, incarnation, "!sent", digest)

    def streams(self, run_id: str, incarnation: str | None = None) -> str:
        """The prefix of a run's streams (of one incarnation)."""
        return join(self.prefix, "streams", run_id, incarnation or "") + "/"

    def stream(self, run_id: str, incarnation: str, name: str) -> str:
        """The prefix of the items of a run's stream ``name``."""
        return join(self.prefix, "streams", run_id, incarnation, name_key(name)) + "/"

    def stream_item(self, run_id: str, incarnation: str, name: str, offset: int) -> str:
        """The item at ``offset`` (0 for the first) of a run's stream ``name``:
        zero-padded, so a stream's items list in order."""
        return self.stream(run_id, incarnation, name) + stream_offset_key(offset)

    def callbacks(self, run_id: str | None = None, incarnation: str | None = None) -> str:
        """The prefix of the callbacks' completions (of one run, of one incarnation)."""
        parts = [part for part in (run_id, incarnation) if part]
        return join(self.prefix, "callbacks", *parts) + "/"

    def callback(self, run_id: str, incarnation: str, token: str) -> str:
        """Where a callback's completion is put: by ``runner.complete_callback``,
        or by whoever holds its presigned URL (:mod:`stepstone.records.callbacks`)."""
        return join(self.prefix, "callbacks", run_id, incarnation, token)

    def attempts(self, run_id: str, incarnation: str | None = None) -> str:
        """The prefix of a run's attempt records (of one incarnation)."""
        return join(self.prefix, "attempts", run_id, incarnation or "") + "/"

    def attempt(self, run_id: str, incarnation: str, claim: int) -> str:
        """The record of a run's ``claim``-th claim (zero-padded: keys list in order)."""
        return join(self.prefix, "attempts", run_id, incarnation, f"{claim:06d}")

    def waiters(self, run_id: str) -> str:
        """The runs that joined ``run_id`` and wait for its end
        (:mod:`stepstone.records.family`)."""
        return join(self.prefix, "waiters", run_id)

    def children(self, run_id: str) -> str:
        """The prefix of the children a run submitted."""
        return join(self.prefix, "children", run_id) + "/"

    def child(self, run_id: str, child: str) -> str:
        return join(self.prefix, "children", run_id, child)

    def schedule(self, name: str) -> str:
        return join(self.prefix, "schedules", name_key(name))

    def schedules(self) -> str:
        """The prefix of the schedules' markers."""
        return join(self.prefix, "schedules") + "/"

    def slots(self, digest: str) -> str:
        return join(self.prefix, "slots", digest)

    def rate(self, digest: str) -> str:
        return join(self.prefix, "rates", digest)

    def singleton(self, digest: str) -> str:
        """A singleton key's live run (:mod:`stepstone.records.singleton_runs`)."""
        return join(self.prefix, "singletons", digest)

    def debounce(self, digest: str) -> str:
        """A debounce key's windows (:mod:`stepstone.records.debounce_windows`)."""
        return join(self.prefix, "debounce", digest)

    def workers(self) -> str:
        """The prefix of the workers' records (:mod:`stepstone.runtime.worker.presence`)."""
        return join(self.prefix, "workers") + "/"

    def audit(self, day: str = "") -> str:
        """The prefix of the audit records (of one UTC ``day``, ``2026-01-31``):
        :mod:`stepstone.records.audit_log`."""
        return join(self.prefix, "audit", day) + "/"

    def audit_record(self, record_id: str) -> str:
        """The audit record ``<date>T<time>-<random>``, kept in its day's folder."""
        day, _, rest = record_id.partition("T")
        return join(self.prefix, "audit", day, rest)

    def audit_runs(self, run_id: str = "") -> str:
        """The prefix of the marks of the actions on one run (or on any)."""
        return join(self.prefix, "audit-runs", run_id) + "/"

    def audit_run(self, run_id: str, record_id: str) -> str:
        """The mark, under ``run_id``, of the action that record ``record_id`` holds."""
        return join(self.prefix, "audit-runs", run_id, record_id)

    def copy_mark(self) -> str:
        """The object that says this store is a copy of another (its history,
        to inspect): a worker refuses to start on it."""
        return join(self.prefix, "stepstone-copy")

    def run_id_of_outcome(self, key: str) -> str:
        return key.rsplit("/", 1)[-1]


def _plain(part: str) -> bool:
    """A part that ``join`` would keep as it is: non-empty, no '/' at either end."""
    return bool(part) and part[0] != "/" and part[-1] != "/"


POSITION_MARK = "#"
"""What starts the key segment of a memo keyed by its place in the run."""
BRANCH_MARK = "b"
"""After POSITION_MARK, what starts the segment of a call in a branch other
than the root: ``#b2.1-00000003``."""

Path = tuple[int, ...]
"""A branch's place in a run's task tree (:mod:`stepstone.execute.branches`):
() for the run's own task, (2, 1) for the first task created by its second."""


def step_key(name: str, occurrence: int, *, internal: str = "", branch: Path = ()) -> str:
    """The key segment of a step: its name percent-encoded, and ``@n`` for the
    n-th call of one name in a run (n > 1). ``@`` is always encoded in names,
    so a suffix never collides with a name. A wait's ``internal`` memo of a
    name is ``!<internal>.<name>@n`` (``@1`` included). In a branch other
    than the root the suffix names it: ``!patch.<name>@b2.1-n``.

    A segment is at most MAX_SEGMENT_LENGTH bytes on every backend; a name
    whose encoding would make it longer (86 spaces are 258 bytes) is stored
    as the head of its encoding, ``@~`` and a hash of the whole name.
    """
    if not isinstance(name, str) or not name:
        raise ValueError("a step name must be a non-empty str")
    encoded = quote(name, safe="")
    if encoded in (".", ".."):
        encoded = encoded.replace(".", "%2E")
    head = f"!{internal}." if internal else ""
    suffix = "" if occurrence == 1 and not internal else f"@{occurrence}"
    if branch:
        suffix = f"@{BRANCH_MARK}{branch_name(branch)}-{occurrence}"
    room = MAX_SEGMENT_LENGTH - len(head) - len(suffix)
    if len(encoded) > room:  # quote's output is ASCII: a character is a byte
        digest = hashlib.sha256(name.encode()).hexdigest()
        encoded = _head(name, room - len(HASHED) - HASH_LENGTH) + HASHED + digest[:HASH_LENGTH]
    return head + encoded + suffix


def position_key(position: int, branch: Path = ()) -> str:
    """The key segment of the memo at ``position`` (1 for the first call) of
    ``branch``: zero-padded, so a branch's memos list in the order it made
    them. The root's calls are ``#00000003`` (as before branches existed),
    a branch's ``#b2.1-00000003``."""
    if not branch:
        return f"{POSITION_MARK}{position:08d}"
    return f"{POSITION_MARK}{BRANCH_MARK}{branch_name(branch)}-{position:08d}"


def branch_name(branch: Path) -> str:
    """``"2.1"``; ``""`` for the root."""
    return ".".join(str(step) for step in branch)


def place_of(segment: str) -> tuple[Path, int] | None:
    """The branch and position a memo's key segment names; None for a memo
    keyed by its name (written before positions existed, or outside the
    history)."""
    if not segment.startswith(POSITION_MARK):
        return None
    body = segment[1:]
    if body.isdigit():
        return (), int(body)
    if not body.startswith(BRANCH_MARK):
        return None
    path, dash, position = body[1:].partition("-")
    steps = path.split(".")
    if not dash or not position.isdigit() or not all(step.isdigit() for step in steps):
        return None
    return tuple(int(step) for step in steps), int(position)


def position_of(segment: str) -> int | None:
    """The position a memo's key segment names in its branch; None for a
    memo keyed by its name (see :func:`place_of`)."""
    place = place_of(segment)
    return None if place is None else place[1]


def _head(name: str, room: int) -> str:
    """The encoding of the longest start of ``name`` that fits in ``room``
    bytes, cut between characters, never inside one's escapes."""
    head = ""
    for char in name:
        encoded = quote(char, safe="")
        if len(head) + len(encoded) > room:
            break
        head += encoded
    return head


STREAM_OFFSET_DIGITS = 12
"""Digits of a stream item's offset in its key (a trillion items a stream)."""


def stream_offset_key(offset: int) -> str:
    """The last segment of a stream item's key: its offset, zero-padded."""
    return f"{offset:0{STREAM_OFFSET_DIGITS}d}"


def stream_offset_of(segment: str) -> int | None:
    """The offset a stream item's key segment names; None for one that names none."""
    if len(segment) != STREAM_OFFSET_DIGITS or not segment.isdigit():
        return None
    return int(segment)


def event_seq(now: float) -> str:
    """The last segment of an event's key: the sender's clock in ns (so a
    name's events list in the order they were sent) and a random part (so
    two senders never collide)."""
    return f"{int(now * 1e9):020d}-{secrets.token_hex(4)}"


def name_key(name: str) -> str:
    """An event's or schedule's name as one key segment (percent-encoded)."""
    return step_key(name, 1)


def step_name(key: str) -> str:
    """The readable name of a step key (``charge@2`` -> ``charge #2``); a
    hashed long name shows its head and an ellipsis."""
    base, _, rest = key.partition("@")
    hashed = rest.startswith("~")
    if hashed:
        _, _, rest = rest.partition("@")
    return unquote(base) + ("..." if hashed else "") + (f" #{rest}" if rest else "")
