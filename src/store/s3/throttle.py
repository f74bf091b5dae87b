"""AdaptiveRates: a process's send rates to a bucket, per partition and per hot object.

Why: a partition of a bucket serves a bounded number of requests a second
and answers the rest SlowDown (or 429); what lets a crowd's requests
through is each process sending less, at the rate its own answers allow
(stepstone.store.s3.send_rate says how that rate moves).

**One budget a process.** Every request a process sends to a bucket draws
on the same rates, whichever store, queue or part of the engine sends it:
:func:`process_rates` hands every ``S3Store`` on one endpoint and bucket in
the process the same :class:`AdaptiveRates`. Two stores on one bucket
learning its limits apart would each send what the partition allows.

One rate per partition of the bucket and class of request (reads: GET,
HEAD, LIST; writes: the rest), as far as a client can tell: the first key
segment under the store's prefix (``queue``, ``memos``, ``outcomes``), which
is how S3 partitions a fresh bucket, and its limits are per partition and
class. One rate for the whole store would hold every partition to
the rate one of them was cut to (the submits are all on ``queue``, three of
a job's five writes on ``memos``). S3 splits a prefix that stays hot into
more partitions over minutes; until it does, the first segment is the
partition.

A single object may be limited too, whatever its partition serves (GCS:
about one write a second per object): its refusals give it turns of its
own rather than cut its partition's rate (stepstone.store.s3.hot_objects).
A request takes its turn through :meth:`AdaptiveRates.sending`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

from ..errors import PreconditionFailed
from .hot_objects import HOT_AFTER, HotObjects
from .object_turns import ObjectTurns
from .send_rate import AdaptiveRate


class AdaptiveRates:
    """One :class:`AdaptiveRate` per partition and class, the first segment
    of a key, made on first use, and the bucket's hot objects (every object,
    with ``object_turns``: a store that limits each one); ``clock`` and
    ``sleep`` are handed to each."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        object_turns: bool = False,
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        self.by_partition: dict[str, AdaptiveRate] = {}
        self.hot = HotObjects(clock=clock, sleep=sleep, every_object=object_turns)

    def of(self, key: str, *, under: str = "", reads: bool = False) -> AdaptiveRate:
        """The rate of the reads (GET, HEAD, LIST) or the writes (the rest)
        to the partition ``key`` (a key or a listing prefix) is in, of a
        store whose keys are ``under`` a prefix of the bucket: S3 limits
        each class apart."""
        return self._named(partition_of(key, under=under, reads=reads))

    def _named(self, partition: str) -> AdaptiveRate:
        rate = self.by_partition.get(partition)
        if rate is None:
            rate = AdaptiveRate(clock=self._clock, sleep=self._sleep)
            self.by_partition[partition] = rate
        return rate

    def sending(
        self,
        key: str,
        *,
        under: str = "",
        reads: bool = False,
        creates: bool = False,
        location: str = "",
    ) -> Sending:
        """The turn of one request to ``key`` (module docstring); ``creates``:
        a create-if-absent; ``location`` names the object in the warning if
        it turns out hot."""
        full = object_key(key, under=under)
        partition = partition_of(key, under=under, reads=reads)
        return Sending(
            self,
            self._named(partition),
            partition,
            full,
            writes=not reads,
            creates=creates,
            location=location or full,
        )


def object_key(key: str, *, under: str = "") -> str:
    """``key`` of a store whose keys are ``under`` a prefix, as the rates name
    its object (the bucket's key)."""
    return f"{under}/{key}" if under else key


def partition_of(key: str, *, under: str = "", reads: bool = False) -> str:
    """The partition and class ``key`` is sent in (as :meth:`AdaptiveRates.of`),
    named: ``app/queue writes``."""
    partition = key.split("/", 1)[0]
    if under:
        partition = f"{under}/{partition}"
    return partition + (" reads" if reads else " writes")


class Sending:
    """One request's turn: ``sent = await acquire()`` before each try,
    ``record(sent=sent, refused=...)`` after its answer. A write to a hot
    object waits for the object's turn and then its partition's, and its
    refusals count against the object alone, but for a create's: an object
    not there yet has taken no write to be over its limit with (but for a
    rival's create in the same second, once in the object's life), so a
    create refused as too many was refused for its partition. Without that
    rule, on a store told that every object is limited, nothing would slow
    a crowd's creates (step results, outcomes, submits: most of its writes)
    when the partition, not one object, is over."""

    def __init__(
        self,
        rates: AdaptiveRates,
        partition: AdaptiveRate,
        partition_name: str,
        key: str,
        *,
        writes: bool,
        creates: bool,
        location: str,
    ) -> None:
        self._rates = rates
        self._partition = partition
        self._partition_name = partition_name
        self._key = key
        self._writes = writes
        self._creates = creates
        self._location = location

    def _hot(self) -> ObjectTurns | None:
        return self._rates.hot.rate(self._key) if self._writes else None

    async def acquire(self, *, confirm: Callable[[], Awaitable[None]] | None = None) -> float:
        """Wait for the request's turn; the clock's time then. ``confirm``,
        for a conditional write, raises PreconditionFailed if the write
        would be refused as stale: it is called when a hot object's turn was
        waited for, and the turn is then given back, not spent
        (stepstone.store.s3.conflicts.confirm_precondition)."""
        hot = self._hot()
        if hot is not None:
            sent, waited = await hot.turn()
            if waited and confirm is not None:
                try:
                    await confirm()
                except PreconditionFailed:
                    hot.give_back(sent)
                    raise
        return await self._partition.acquire()

    def record(self, *, sent: float, refused: bool) -> None:
        hot = self._hot()
        if hot is None and self._writes:
            hot = self._rates.hot.answered(
                self._key,
                partition=self._partition_name,
                refused=refused,
                location=self._location,
                creates=self._creates,
            )
            if hot is not None:
                refused = False  # (the refusal that made it hot is the object's, counted there)
                if self._partition.throttles < HOT_AFTER:
                    self._partition.forget()  # its refusals were this object's alone
        elif hot is not None and refused and self._creates:
            hot.give_back(sent)  # (the object took no write: the partition refused it)
        elif hot is not None:
            hot.record(sent=sent, refused=refused)
            refused = False
        self._partition.record(sent=sent, refused=refused)


_PROCESS: dict[str, AdaptiveRates] = {}
_PROCESS_LOCK = threading.Lock()


def process_rates(service: str, *, object_turns: bool = False) -> AdaptiveRates:
    """The send rates every request of this process to ``service`` (an
    endpoint and a bucket: ``S3Store`` names them) shares (module docstring);
    ``object_turns`` makes every object take turns from then on, for every
    store of the process on it (one store told the bucket limits each object
    is enough)."""
    with _PROCESS_LOCK:
        rates = _PROCESS.get(service)
        if rates is None:
            rates = _PROCESS[service] = AdaptiveRates()
        if object_turns:
            rates.hot.every_object = True
        return rates
