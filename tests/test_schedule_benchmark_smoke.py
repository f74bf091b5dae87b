"""A tiny run of benchmarks.schedules, so it cannot rot: it runs, counts the
marker's requests, and each policy starts the runs its rule says."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from benchmarks.schedules import measure


async def test_each_policy_starts_what_its_rule_says_and_counts_the_marker() -> None:
    # Runs hold 100 s, ticks come every 60 s: every other tick overlaps.
    found = {
        policy: await measure(policy, workers=2, ticks=6, every=60, hold=100, step=20)
        for policy in ("allow_all", "skip", "cancel_other")
    }
    assert found["allow_all"]["runs_started_per_tick"] == 1.0
    assert found["skip"]["runs_started_per_tick"] == 0.5
    assert found["cancel_other"]["runs_started_per_tick"] == 1.0
    assert found["skip"]["outcome_heads_per_tick"] >= 1.0  # the liveness look
    assert found["allow_all"]["outcome_heads_per_tick"] == 0.0
    assert all(f["marker_per_tick"]["CPUT"] >= 1 for f in found.values())
