"""An API process that knows its runs only by their idempotency keys: it
never imports the jobs' module (key_jobs) nor holds a Job, and reaches every
run through ``IdempotencyKey``. Run as ``python key_api.py STORE DIR``; it
prints one JSON document of what each call answered."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from stepstone import EventRefused, IdempotencyKey, JobFailed, JobRunner, JobStatus
from stepstone.testing import wait_until

DEADLINE = 60.0


async def status_becomes(runner: JobRunner, run: IdempotencyKey, wanted: JobStatus) -> None:

    async def there() -> bool:
        state = await runner.status(run)
        return state is not None and state.status is wanted

    await wait_until(there, timeout=DEADLINE, interval=0.05, message=f"{run.key} to be {wanted}")


async def main(store: str, shared: Path) -> dict[str, Any]:
    said: dict[str, Any] = {}
    runner = JobRunner(store)  # no job types: this process knows none
    try:
        doc = IdempotencyKey("doc:42")
        said["run_id"] = doc.run_id
        await status_becomes(runner, doc, JobStatus.WAITING_FOR_EVENT)
        said["waiting_for"] = (await runner.status(doc)).waiting_for  # type: ignore[union-attr]
        said["sent"] = await runner.send_event(doc, "approved", {"by": "ada"}, key="hook-1")
        said["sent_again"] = await runner.send_event(doc, "approved", {"by": "eve"}, key="hook-1")
        said["result"] = await runner.handle(doc).result(timeout=DEADLINE)
        said["history"] = [a.result.value for a in await runner.history(doc)]
        replayed = await runner.replay(doc, from_step="store")
        said["replayed_kept"] = replayed.kept_memos
        said["replay_result"] = await runner.handle(doc).result(timeout=DEADLINE)

        other = IdempotencyKey("doc:43")
        await status_becomes(runner, other, JobStatus.WAITING_FOR_EVENT)
        said["cancelled"] = await runner.cancel(other)
        said["cancelled_status"] = (await runner.status(other)).status.value  # type: ignore[union-attr]

        picky = IdempotencyKey("picky:1")
        await status_becomes(runner, picky, JobStatus.FAILED)  # dead, with its failed outcome
        try:
            await runner.handle(picky).result(timeout=DEADLINE)
        except JobFailed as exc:
            said["picky_failed"] = exc.reason
        (shared / "allow-1").touch()
        await runner.retry(picky)
        said["picky_result"] = await runner.handle(picky).result(timeout=DEADLINE)

        nobody = IdempotencyKey("doc:never")
        said["nobody_status"] = await runner.status(nobody)
        try:
            await runner.send_event(nobody, "approved", {"by": "ada"})
        except EventRefused as exc:
            said["nobody_event"] = str(exc)
        said["jobs_imported"] = "key_jobs" in sys.modules
    finally:
        await runner.close()
    return said


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], Path(sys.argv[2])))))
