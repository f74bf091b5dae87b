"""Backoff: the retry schedule's curve, cap, and deterministic jitter."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stepstone.runtime.backoff import Backoff


def test_exponential_doubles_from_base_up_to_the_cap() -> None:
    backoff = Backoff(base=1.0, cap=10.0, jitter=0.0)
    assert [backoff.delay(a, "job") for a in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_fibonacci_grows_by_the_fibonacci_numbers() -> None:
    backoff = Backoff(base=2.0, cap=1000.0, jitter=0.0, strategy="fibonacci")
    assert [backoff.delay(a, "job") for a in range(1, 8)] == [2, 2, 4, 6, 10, 16, 26]


def test_zero_base_retries_at_once_whatever_the_attempt() -> None:
    backoff = Backoff(base=0.0)
    assert {backoff.delay(a, "job") for a in range(1, 50)} == {0.0}


def test_a_huge_attempt_number_stays_at_the_cap_without_overflowing() -> None:
    backoff = Backoff(base=1.0, cap=300.0, jitter=0.0)
    assert backoff.delay(100_000, "job") == 300.0


def test_jitter_is_deterministic_per_job_and_attempt() -> None:
    """Two workers (or a replay of the logs) compute the same delay."""
    a, b = Backoff(jitter=0.5), Backoff(jitter=0.5)
    assert a.delay(3, "job-1") == a.delay(3, "job-1") == b.delay(3, "job-1")
    assert a.delay(3, "job-1") != a.delay(3, "job-2")
    assert a.delay(3, "job-1") < a.undelayed(3)


def test_jitter_spreads_different_jobs_apart() -> None:
    """The point of jitter: jobs that failed together do not return together."""
    backoff = Backoff(base=100.0, jitter=1.0)
    delays = {backoff.delay(1, f"job-{i}") for i in range(50)}
    assert len(delays) == 50
    assert min(delays) < 30 and max(delays) > 70


@given(
    attempt=st.integers(min_value=1, max_value=200),
    job_id=st.text(max_size=40),
    jitter=st.floats(min_value=0.0, max_value=1.0),
    base=st.floats(min_value=0.0, max_value=1000.0),
)
def test_jittered_delay_stays_within_its_spread(
    attempt: int, job_id: str, jitter: float, base: float
) -> None:
    backoff = Backoff(base=base, cap=3600.0, jitter=jitter)
    full = backoff.undelayed(attempt)
    delay = backoff.delay(attempt, job_id)
    assert full * (1 - jitter) - 1e-9 <= delay <= full
    assert full <= 3600.0


@pytest.mark.parametrize(
    "kwargs",
    [{"base": -1.0}, {"cap": -1.0}, {"jitter": 1.5}, {"jitter": -0.1}, {"strategy": "linear"}],
)
def test_nonsense_settings_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Backoff(**kwargs)  # type: ignore[arg-type]
