"""The throughput page: runs finished and failed over the last hour and day,
as charts (:mod:`stepstone.ui.charts`) of :func:`stepstone.ops.throughput.throughput`.

It counts from the outcome listing the runs list uses (:mod:`stepstone.ops.finished`)
and reads at most ``OUTCOME_READS`` outcome records a refresh, keeping what
it read (:class:`stepstone.ops.throughput.Statuses`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from stepstone.ops.finished import FinishedListing
from stepstone.ops.throughput import FINISHED, Bucket, Statuses, throughput
from stepstone.runner import JobRunner
from stepstone.ui.charts import bars
from stepstone.ui.respond import render
from stepstone.ui.routes import LISTING_WAIT, OUTCOME_READS


async def throughput_page(request: Request) -> Response:
    runner: JobRunner = request.app.state.runner
    finished: FinishedListing = request.app.state.finished
    statuses: Statuses = request.app.state.statuses
    listed = await finished.latest(wait=LISTING_WAIT)
    now = runner.clock.now()
    counted = await throughput(
        runner, [] if listed is None else listed.infos, now, statuses, reads=OUTCOME_READS
    )
    return render(
        request,
        "throughput.html",
        {
            "counted": counted,
            "reads": OUTCOME_READS,
            "listed": listed,
            "listing_failed": finished.failed,
            "sections": [
                (
                    "Last hour, by minute",
                    _totals(counted.hour),
                    bars(counted.hour, "runs finished each minute of the last hour"),
                ),
                (
                    "Last day, by hour",
                    _totals(counted.day),
                    bars(counted.day, "runs finished each hour of the last day"),
                ),
            ],
        },
    )


def _totals(buckets: list[Bucket]) -> dict[str, int]:
    """Runs finished in ``buckets``, and of them how many ended each way."""
    totals = {"finished": sum(bucket.finished for bucket in buckets)}
    for status in FINISHED:
        totals[status] = sum(bucket.by_status.get(status, 0) for bucket in buckets)
    return totals
