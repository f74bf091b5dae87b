"""A job submitted where a worker has room starts there at once: its queue
record is written claimed (one write, where an enqueue and a claim take two),
and no claim goes through the queue. A worker with no room, a queue holding
jobs it has not claimed yet, or a runner running no worker: the job is
enqueued for any worker, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from wf_jobs import RUNNER_JOBS, Adder, Counters, GatedKeyed, Keyed
from wf_support import wait_until

from stepstone import JobRunner
from stepstone.runtime import FakeClock
from stepstone.store import MemoryStore, NewObject, StoreError


class _QueueWrites(MemoryStore):
    """A MemoryStore that notes each write to a queue record: ("create" or
    "swap" or "delete", job id)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock.now)
        self.writes: list[tuple[str, str]] = []

    def _note(self, what: str, key: str) -> None:
        if key.startswith("queue/"):
            self.writes.append((what, key.rsplit("/", 1)[-1]))

    async def put_many_if_absent(self, objects: Sequence[NewObject]) -> list[str | StoreError]:
        for obj in objects:
            self._note("create", obj.key)
        return await super().put_many_if_absent(objects)

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        self._note("swap", key)
        return await super().put_if_match(key, data, etag)

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        self._note("delete", key)
        await super().delete(key, if_match=if_match)


def _runner(store: MemoryStore, clock: FakeClock, **options: object) -> JobRunner:
    return JobRunner(
        store, jobs=RUNNER_JOBS, state=[Counters()], clock=clock, poll_interval=0.05, **options
    )


async def test_a_job_submitted_where_the_worker_has_room_is_written_once(clock: FakeClock) -> None:
    store = _QueueWrites(clock)
    async with _runner(store, clock) as runner:
        await wait_until(lambda: runner.worker.ready_for(Adder.NAME))
        handle = await runner.submit(Adder(a=1, b=2))
        assert await handle == 3
        assert store.writes == [("create", handle.id), ("delete", handle.id)]
        assert runner.worker.stats.claimed == 1


async def test_a_keyed_job_handed_over_is_joined_by_its_duplicates(clock: FakeClock) -> None:
    store = _QueueWrites(clock)
    counters = Counters()
    async with JobRunner(
        store, jobs=RUNNER_JOBS, state=[counters], clock=clock, poll_interval=0.05
    ) as runner:
        await wait_until(lambda: runner.worker.ready_for(GatedKeyed.NAME))
        first = await runner.submit(GatedKeyed(n=7))
        await counters.started.wait()
        again = await runner.submit(GatedKeyed(n=7))
        assert first.newly_submitted and not again.newly_submitted
        counters.gate.set()
        assert (await first, await again) == (7, 7)
        assert counters.counts["gated"] == 1
        assert store.writes[0] == ("create", first.id)
        assert ("swap", first.id) not in store.writes  # (the duplicate's create was refused)


async def test_with_no_room_here_a_job_is_enqueued_and_claimed(clock: FakeClock) -> None:
    store = _QueueWrites(clock)
    counters = Counters()
    async with JobRunner(
        store, jobs=RUNNER_JOBS, state=[counters], clock=clock, poll_interval=0.05, concurrency=1
    ) as runner:
        await wait_until(lambda: runner.worker.ready_for(GatedKeyed.NAME))
        busy = await runner.submit(GatedKeyed(n=1))
        await counters.started.wait()
        assert not runner.worker.ready_for(Keyed.NAME)
        waiting = await runner.submit(Keyed(n=2))
        counters.gate.set()
        assert (await busy, await waiting) == (1, 2)
        assert [w for w in store.writes if w[1] == waiting.id] == [
            ("create", waiting.id),
            ("swap", waiting.id),  # its claim
            ("delete", waiting.id),
        ]


async def test_a_runner_running_no_worker_enqueues_for_any_worker(clock: FakeClock) -> None:
    store = _QueueWrites(clock)
    submitter = _runner(store, clock)
    handle = await submitter.submit(Adder(a=2, b=2))
    assert store.writes == [("create", handle.id)]
    async with _runner(store, clock) as worker:
        assert await worker.handle(handle.id, Adder) == 4
    assert store.writes[1] == ("swap", handle.id)
