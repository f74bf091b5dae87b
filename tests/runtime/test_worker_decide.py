"""decide: the pure rules that turn how an attempt ended into what happens next."""

from __future__ import annotations

import asyncio

import pytest

from stepstone.runtime.backoff import Backoff
from stepstone.runtime.decide import Expired, NoHandler, Raised, Returned, TimedOut, decide
from stepstone.runtime.decision import Ack, Dead, FailureKind, Retry, Success
from stepstone.runtime.error_text import (
    MAX_MESSAGE_CHARS,
    describe,
    format_traceback,
    qualified_name,
    with_traceback,
)
from stepstone.runtime.errors import MalformedPayload, Permanent, RetryLater, UnknownKind
from stepstone.runtime.queue import Delivery
from stepstone.store.errors import StoreUnavailable

NOW = 1_000.0
BACKOFF = Backoff(base=10.0, cap=1000.0, jitter=0.0)


def delivery(attempt: int = 1, max_attempts: int = 3, kind: str = "k", claims: int = 1) -> Delivery:
    return Delivery(
        id="job-1",
        kind=kind,
        payload=b"",
        attempt=attempt,
        max_attempts=max_attempts,
        token="t",
        lease_expires_at=NOW + 60,
        claims=claims,
    )


def test_a_returned_value_is_acked_with_the_value() -> None:
    assert decide(delivery(), Returned({"x": 1}), BACKOFF) == Ack(Success({"x": 1}))


def test_a_transient_error_with_attempts_left_retries_after_the_backoff() -> None:
    decision = decide(delivery(attempt=2), Raised(ValueError("flaky")), BACKOFF)
    assert decision == Retry(delay=20.0, count=True, error="ValueError: flaky")


def test_a_transient_error_on_the_last_attempt_is_exhausted_with_that_error() -> None:
    decision = decide(delivery(attempt=3), Raised(ValueError("third")), BACKOFF)
    assert isinstance(decision, Dead)
    failure = decision.terminal
    assert failure.reason is FailureKind.EXHAUSTED
    assert failure.message == "ValueError: third"
    assert failure.error_type == "ValueError"
    assert failure.attempt == 3
    assert decision.reason == "exhausted: ValueError: third"


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (Permanent("card declined"), FailureKind.PERMANENT),
        (MalformedPayload("bad msgpack"), FailureKind.MALFORMED),
        (UnknownKind("who?"), FailureKind.UNKNOWN),
    ],
)
def test_permanent_errors_die_on_the_first_attempt(error: Exception, kind: FailureKind) -> None:
    decision = decide(delivery(attempt=1), Raised(error), BACKOFF)
    assert isinstance(decision, Dead)
    assert decision.terminal.reason is kind
    assert decision.terminal.attempt == 1
    assert decision.terminal.error_type == qualified_name(type(error))


def test_a_timeout_retries_then_dies_as_a_timeout() -> None:
    first = decide(delivery(attempt=1), TimedOut(5.0), BACKOFF)
    assert isinstance(first, Retry) and first.count and first.delay == 10.0
    assert "timed out after 5s" in first.error
    last = decide(delivery(attempt=3), TimedOut(5.0), BACKOFF)
    assert isinstance(last, Dead)
    assert last.terminal.reason is FailureKind.TIMEOUT


def test_retry_later_waits_its_own_delay_and_spends_no_attempt() -> None:
    """Even on the last attempt: a rate limit is not a failure."""
    decision = decide(delivery(attempt=3), Raised(RetryLater(42.0)), BACKOFF)
    assert decision == Retry(42.0, count=False, error="RetryLater: retry in 42s")


def test_a_counted_retry_later_on_the_last_attempt_is_exhausted() -> None:
    decision = decide(delivery(attempt=3), Raised(RetryLater(5.0, count=True)), BACKOFF)
    assert isinstance(decision, Dead)
    assert decision.terminal.reason is FailureKind.EXHAUSTED


def test_a_cancelled_error_from_the_handler_is_an_ordinary_failure() -> None:
    decision = decide(delivery(attempt=1), Raised(asyncio.CancelledError()), BACKOFF)
    assert isinstance(decision, Retry) and decision.count


def test_no_handler_is_unknown_and_names_the_kind() -> None:
    decision = decide(delivery(kind="mail.send"), NoHandler(), BACKOFF)
    assert isinstance(decision, Dead)
    assert decision.terminal.reason is FailureKind.UNKNOWN
    assert decision.terminal.message == "no handler registered for job type `mail.send`"


def test_a_run_whose_leases_lapsed_too_often_is_expired_on_the_attempt_it_was_on() -> None:
    decision = decide(delivery(attempt=2, max_attempts=3), Expired(10, 10), BACKOFF)
    assert isinstance(decision, Dead)
    assert decision.terminal.reason is FailureKind.EXPIRED
    assert decision.terminal.message == (
        "its lease lapsed 10 times (its workers died or hung under it), "
        "the most a run is given (10), on attempt 2"
    )
    assert decision.terminal.attempt == 2
    assert decision.reason == f"expired: {decision.terminal.message}"


def test_a_record_an_earlier_release_counted_past_its_last_attempt_is_expired() -> None:
    """Before lapses were counted apart, a takeover counted an attempt, even
    past max_attempts: such a record, met after an upgrade, still dies."""
    decision = decide(delivery(attempt=4, max_attempts=3), Expired(0), BACKOFF)
    assert isinstance(decision, Dead)
    assert decision.terminal.reason is FailureKind.EXPIRED
    assert decision.terminal.message == "lease expired on attempt 3, the last of 3"
    assert decision.terminal.attempt == 3


def test_describe_survives_an_exception_whose_str_raises() -> None:
    class Nasty(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert describe(Nasty()) == "<unprintable Nasty>"
    decision = decide(delivery(attempt=3), Raised(Nasty()), BACKOFF)
    assert isinstance(decision, Dead)
    assert decision.terminal.message == "<unprintable Nasty>"
    assert decision.terminal.error_type is not None
    assert decision.terminal.error_type.endswith("Nasty")


def test_messages_are_truncated_and_empty_ones_are_just_the_type() -> None:
    assert len(describe(ValueError("x" * 100_000))) == MAX_MESSAGE_CHARS
    assert describe(KeyError()) == "KeyError"
    decision = decide(delivery(attempt=3), Raised(ValueError("y" * 100_000)), BACKOFF)
    assert isinstance(decision, Dead)
    assert len(decision.reason) <= MAX_MESSAGE_CHARS


def test_qualified_name_keeps_the_module_except_for_builtins() -> None:
    assert qualified_name(ValueError) == "ValueError"
    assert qualified_name(Permanent) == "stepstone.runtime.errors.Permanent"


def test_decide_reads_no_clock_and_does_no_io() -> None:
    """The same inputs give the same decision: it is a function, not a process."""
    args = (delivery(attempt=1), Raised(OSError("reset")), Backoff(jitter=0.5))
    assert decide(*args) == decide(*args)


def test_a_permanent_wrapper_reports_the_error_it_wraps() -> None:
    """A layer that classifies an application error as permanent wraps it; the
    failure names what the application raised."""

    class Classified(Permanent):
        def __init__(self, original: BaseException) -> None:
            self.original = original
            super().__init__(str(original))

    decision = decide(delivery(attempt=1), Raised(Classified(KeyError("sku-9"))), BACKOFF)
    assert isinstance(decision, Dead)
    assert decision.terminal.reason is FailureKind.PERMANENT
    assert decision.terminal.message == "KeyError: 'sku-9'"
    assert decision.terminal.error_type == "KeyError"


def test_a_store_outage_retries_without_spending_an_attempt_backing_off_by_claims() -> None:
    """The store failed, not the job: even the last attempt is handed back,
    and the delay grows with the claims since the attempt number stands still."""
    outage = StoreUnavailable("bucket down")
    first = decide(delivery(attempt=3, claims=3), Raised(outage), BACKOFF)
    later = decide(delivery(attempt=3, claims=6), Raised(outage), BACKOFF)
    assert isinstance(first, Retry) and isinstance(later, Retry)
    assert not first.count and not later.count
    assert (first.delay, later.delay) == (40.0, 320.0)


# -- where an attempt failed: its traceback -------------------------------------------


def raised_here() -> BaseException:
    try:
        raise ValueError("from here")
    except ValueError as error:
        return error


def test_a_failed_attempt_keeps_its_traceback_and_an_uncounted_retry_none() -> None:
    trace = format_traceback(raised_here())
    assert trace is not None and "in raised_here" in trace
    assert trace.endswith("ValueError: from here")
    counted = decide(delivery(), Raised(ValueError("x"), trace), BACKOFF)
    assert isinstance(counted, Retry) and counted.traceback == trace
    dead = decide(delivery(), Raised(Permanent("x"), trace), BACKOFF)
    assert isinstance(dead, Dead) and dead.terminal.traceback == trace
    for verdict in (RetryLater(5.0), StoreUnavailable("down")):
        uncounted = decide(delivery(), Raised(verdict, trace), BACKOFF)
        assert isinstance(uncounted, Retry) and uncounted.traceback is None


def test_the_queue_record_takes_what_fits_of_the_traceback_beside_the_message() -> None:
    trace = "Traceback (most recent call last):\n" + "  frame\n" * 2000 + "ValueError: x"
    text = with_traceback("ValueError: x", trace)
    assert len(text) <= MAX_MESSAGE_CHARS
    assert text.startswith("ValueError: x\n[... earlier frames cut]") and text.endswith(
        "ValueError: x"
    )
    long_message = "m" * (MAX_MESSAGE_CHARS - 10)
    assert with_traceback(long_message, trace) == long_message
    assert with_traceback("ValueError: x", None) == "ValueError: x"
    assert format_traceback(ValueError("never raised")) is None
