"""A store that cannot be used as it answers stops the runner with one
error: the worker stops claiming, logs it once, and every handle awaiting
a run in that runner raises it, instead of waiting for ever."""

from __future__ import annotations

import asyncio
import logging

import pytest
from wf_jobs import Keyed

from stepstone import JobRunner
from stepstone.store import MemoryStore, StoreConfigError

BROKEN = "this store refused 3 conditional writes whose condition held (test)"


class RefusesSwaps(MemoryStore):
    """Takes creates; answers every compare-and-swap as a store that refuses
    what holds does once the S3Store has seen enough of it."""

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        raise StoreConfigError(BROKEN, location=self.location, key=key)


async def test_the_worker_stops_and_every_waiting_handle_raises_the_stores_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="stepstone.runtime.worker"):
        async with JobRunner(RefusesSwaps(), jobs=[Keyed], poll_interval=0.05) as runner:
            handles = [await runner.submit(Keyed(n=n)) for n in range(3)]
            for handle in handles:
                with pytest.raises(StoreConfigError, match="refused 3 conditional writes"):
                    await asyncio.wait_for(handle.result(), 10)
            assert runner.worker.store_broken is not None
            later = await runner.submit(Keyed(n=9))  # a submit still lands (creates work)
            with pytest.raises(StoreConfigError):
                await asyncio.wait_for(later.result(), 10)
    stopped = [r for r in caplog.records if "cannot be used as it answers" in r.getMessage()]
    assert len(stopped) == 1, [r.getMessage() for r in caplog.records]
