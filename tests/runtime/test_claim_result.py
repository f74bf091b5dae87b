"""How a claim ended: one AttemptResult from the worker's decision, what the
queue answered and whether a cancel stopped it (claim_result, pure)."""

from __future__ import annotations

import pytest

from stepstone.runtime import AttemptResult, Settlement
from stepstone.runtime.decision import Ack, Dead, Decision, Release, Retry, Suspended
from stepstone.runtime.observer import claim_result
from stepstone.runtime.status import JobStatus, Wait

WAIT = Wait(JobStatus.SLEEPING, "until later")


@pytest.mark.parametrize(
    ("decision", "settled", "cancelled", "result"),
    [
        (Ack(), Settlement.ACKED, False, AttemptResult.SUCCEEDED),
        (Retry(1.0), Settlement.RETRIED, False, AttemptResult.FAILED),
        (Retry(1.0, count=False), Settlement.RETRIED, False, AttemptResult.DEFERRED),
        (Ack(), Settlement.RETRIED, False, AttemptResult.DEFERRED),  # outcome not recorded
        (Dead("x"), Settlement.DEAD, False, AttemptResult.DEAD),
        (Retry(1.0), Settlement.DEAD, False, AttemptResult.DEAD),  # the queue's last
        (Suspended(5.0, WAIT), Settlement.SUSPENDED, False, AttemptResult.SUSPENDED),
        (Suspended(5.0, WAIT), Settlement.RETRIED, False, AttemptResult.SUSPENDED),  # woken
        (Release(), Settlement.RELEASED, False, AttemptResult.RELEASED),
        (None, Settlement.RELEASED, False, AttemptResult.RELEASED),
        (Ack(), Settlement.LOST, False, AttemptResult.LOST),
        (None, Settlement.LOST, False, AttemptResult.LOST),
        (Ack(), None, False, AttemptResult.UNSETTLED),
        (None, None, True, AttemptResult.CANCELLED),
        (None, Settlement.LOST, True, AttemptResult.CANCELLED),
    ],
)
def test_a_claim_ends_as_one_result(
    decision: Decision | None, settled: Settlement | None, cancelled: bool, result: AttemptResult
) -> None:
    assert claim_result(decision, settled, cancelled) is result


def test_the_result_is_the_one_the_history_and_the_package_name() -> None:
    import stepstone
    from stepstone.records import attempts

    assert stepstone.AttemptResult is AttemptResult is attempts.AttemptResult
