"""A tiny run of the benchmark harness, so it cannot rot. No timing is asserted:
only that each case runs, answers correctly and counts requests."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from benchmarks.attribute_listing import one_size
from benchmarks.cases import Spec, run_one
from benchmarks.retention import jobs_with_retention, removal_cost
from benchmarks.run import main, plan, suspended_table, table
from benchmarks.s3_like import S3LikeBucket, S3LikeStore, SlowDown
from stepstone.store import MemoryStore, RetryPolicy
from stepstone.store.s3.conflicts import WriteConflict


def test_w3_on_memory_and_files(tmp_path: object) -> None:
    results = [
        run_one(Spec("w3", "memory", n=20, label="m")),
        run_one(Spec("w3", "memory-sq", n=10, label="sq")),
        run_one(Spec("w3", "file", n=5, label="f", workdir=str(tmp_path))),
        run_one(Spec("latency", "memory", n=5, label="lat")),
    ]
    for r in results:
        assert r["jobs_per_s"] > 0
    memory = results[0]
    assert memory["requests_per_job"]["CPUT"] == 4  # 3 memos and the outcome
    assert memory["r_requests_per_job"]["GET"] == 1  # a cached resubmission: one read
    queue = results[1]["requests_by_area"]
    assert queue["CPUT queue"] == 1  # the enqueue, holding the claim: the worker had room
    assert queue["DELETE queue"] == 1  # the ack
    assert "| m |" in table(results)


def test_suspended_case_runs() -> None:
    r = run_one(Spec("suspended", "memory-sq", n=5, window=0.5, label="z"))
    # Runs asleep cost nothing but the listing (its pace is timing: not asserted).
    assert {op: n for op, n in r["sleeping_per_minute"].items() if op != "LIST"} == dict.fromkeys(
        ("GET", "HEAD", "PUT", "CPUT", "DELETE"), 0.0
    )
    # the enqueue (holding the claim: the worker had room), the suspend; the wake
    # time; the claim's line of the attempt history
    assert r["suspend"] == {"CPUT queue": 2, "CPUT memos": 1, "CPUT attempts": 1}
    assert "| z | 5 |" in suspended_table([r])


def test_w3_under_fleet_limits_counts_their_requests() -> None:
    own = run_one(Spec("w3", "memory-sq", n=10, limit="own-key", label="k"))["requests_by_area"]
    assert (own["CPUT slots"], own["DELETE slots"]) == (1, 1)  # take the slot, give it back
    line = run_one(Spec("w3", "memory-sq", n=30, limit="line", label="l"))
    assert line["worker"]["suspended"] > 0  # most runs waited for the key
    rated = run_one(Spec("w3", "memory-sq", n=10, limit="rate", label="r"))["requests_by_area"]
    assert 0 < rated["CPUT rates"] <= 1


def test_one_submit_at_a_time_and_submit_many(tmp_path: object) -> None:
    seq = run_one(Spec("w3seq", "file", n=5, label="seq", workdir=str(tmp_path)))
    assert seq["submit_p50_ms"] > 0
    assert seq["requests_by_area"]["CPUT queue"] == 1  # the enqueue holds the claim
    many = run_one(Spec("many", "file", n=10, label="many", workdir=str(tmp_path)))
    assert many["submit_requests_per_job"]["CPUT"] == 1  # the enqueue, nothing else written
    assert many["submit_flushes"] == 1  # one journal flush for the batch


def test_submitters_case_counts_a_submit_only_process_apart() -> None:
    here = run_one(Spec("submitters", "memory-sq", n=8, submitters=4, label="here"))
    assert here["requests_by_area"]["CPUT queue"] == 1  # handed to the worker as submitted
    api = run_one(Spec("submitters", "memory-sq", n=8, submitters=4, api=True, label="api"))
    assert api["requests_by_area"]["CPUT queue"] == 2  # the enqueue, then another's claim
    assert 0 < api["submit_p50_ms"] <= api["submit_p99_ms"]


def test_plan_names_every_case() -> None:
    quick = plan(quick=True)
    assert {"w3-memory", "w3-file", "w3-s3", "scale-4", "latency-memory"} <= set(quick)


def test_scale_case_runs(tmp_path: object) -> None:
    r = run_one(Spec("scale", "file", n=20, processes=2, label="s", workdir=str(tmp_path)))
    assert sum(r["per_process_jobs"]) == 20
    assert "urgent_wait_p50_s" not in r


def test_urgent_jobs_submitted_behind_a_backlog_report_their_wait(tmp_path: object) -> None:
    spec = Spec("scale", "file", n=20, processes=2, urgent=3, pause=0.01, workdir=str(tmp_path))
    r = run_one(spec)
    assert sum(r["per_process_jobs"]) == 23
    assert 0 <= r["urgent_wait_p50_s"] <= r["urgent_wait_max_s"]


def test_saved_results_name_the_commit_they_measured(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    args = ["--quick", "--only", "latency-memory", "--workdir", str(tmp_path), "--out", str(out)]
    assert main(args) == 0
    [result] = json.loads(out.read_text())
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert result["commit"] in (head, head + "+dirty")


def test_the_attribute_listing_benchmark_counts_the_matching_runs_only() -> None:
    rows = {row["listing"]: row for row in asyncio.run(one_size(200))}
    assert rows["tenant=t7, all"]["rows"] == 2
    assert rows["tenant=t7, all"]["requests"] == 3  # a LIST, a GET each
    assert rows["tier=gold (10 runs)"]["requests"] == 11
    assert rows["tenant=t7 without the index"]["GET"] == 200


def test_retention_growth_runs() -> None:
    assert asyncio.run(removal_cost(20)) > 0
    rows = asyncio.run(jobs_with_retention(jobs=20, batch=10))
    assert [row["jobs"] for row in rows] == [10, 20]


def test_a_simulated_fleet_drains_a_backlog_and_counts_its_requests() -> None:
    r = run_one(Spec("fleet", "s3like", n=12, workers=3, concurrency=2, limit_scale=0.0))
    assert r["done"] == 12
    areas = r["requests_by_area"]
    assert areas["CPUT memos"] == 3 and areas["CPUT outcomes"] == 1  # one per step, the outcome
    assert areas["DELETE queue"] == 1  # the ack
    assert r["submit_requests_per_job"]["CPUT"] == 1  # the enqueue
    assert r["slowdowns_per_job"] == 0


def test_a_fleet_on_a_bucket_limiting_every_object_is_told_so() -> None:
    spec = Spec("fleet", "s3like", n=6, workers=2, concurrency=2, limit_scale=0.0)
    r = run_one(dataclasses.replace(spec, object_writes=1.0))
    assert r["done"] == 6
    # Told, a run's record waits its second between its writes: what is left
    # is a claim meeting its record's create within the second.
    assert r["slowdowns_per_job"] <= 1.5


def test_a_fleet_trace_holds_every_request_the_bucket_answered() -> None:
    from benchmarks.fleet import fleet
    from benchmarks.fleet_trace import timeline

    trace: list[tuple[float, str, str]] = []
    spec = Spec("fleet", "s3like", n=6, workers=2, concurrency=2, limit_scale=0.0)
    r = asyncio.run(fleet(spec, trace=trace))
    assert r["done"] == 6
    served = Counter(part for _, part, answer in trace if answer == "served")
    assert served["write memos"] == 6 * 3  # each step's memo, the submits' and joins' beside
    assert served["write outcomes"] == 6
    lines = timeline(trace, r["seconds"])
    assert lines and "write memos=" in "".join(lines)
    # The records' states sampled in a second show on that second's line.
    end = max(t for t, _, _ in trace)
    sampled = timeline(trace, r["seconds"], [(end, Counter(free=2, held=3))])
    assert sampled[-1].endswith("records free/held/lapsed=2/3/0")


def test_a_fleets_record_states_are_sampled_each_second() -> None:
    from benchmarks.fleet import fleet

    states: list[tuple[float, Counter[str]]] = []
    # Jobs of 60 steps, each a request of 20 to 60 ms: a run of a few seconds.
    spec = Spec("fleet", "s3like", n=2, workers=2, concurrency=1, limit_scale=0.0, steps=60)
    r = asyncio.run(fleet(spec, states=states))
    assert r["done"] == 2
    assert states, "no sample in a run of several seconds"
    assert all(set(counts) <= {"free", "held", "lapsed", "unreadable"} for _, counts in states)
    assert any(counts["held"] > 0 for _, counts in states), states  # the jobs being run


def test_the_fleet_oracles_give_the_workers_one_set_of_rates_or_fixed_shares() -> None:
    from benchmarks.fleet_oracles import measure, rates_for
    from benchmarks.s3_like import S3_RATES

    spec = Spec("fleet", "s3like", n=6, workers=2, concurrency=2, limit_scale=0.01)
    shared = rates_for("shared", spec)
    assert shared(1) is shared(2) and shared(0) is not shared(1)  # (the submitter apart)
    fixed = rates_for("fixed", spec)
    rates = fixed(1)
    for mode in ("shared", "fixed"):
        assert asyncio.run(measure(spec, mode))["jobs_per_s"] > 0
    memos = rates.of("memos/x")
    assert memos.rate == S3_RATES["write"] * 0.01 / 2
    memos.record(sent=0.0, refused=True)
    assert memos.rate == S3_RATES["write"] * 0.01 / 2  # no answer moves it


def test_a_simulated_fleet_of_sqs_consumers_counts_sqs_requests_apart() -> None:
    r = run_one(Spec("fleet", "s3like-sqs", n=8, workers=2, concurrency=2, limit_scale=0.0))
    assert r["done"] == 8
    assert r["requests_by_area"]["CPUT memos"] == 3  # the bucket keeps the steps
    sqs = r["sqs_requests_per_job"]
    assert sqs["receive_message"] > 0 and 0 < sqs["delete_message_batch"] <= 1
    assert 0 < r["submit_sqs_requests_per_job"]["send_message_batch"] <= 1


def test_the_s3_like_store_answers_slowdown_past_a_prefixs_rate_and_retries() -> None:
    async def two_writes() -> tuple[S3LikeBucket, list[object]]:
        # A millionth of S3's rates: one write's token, none refilled meanwhile.
        bucket = S3LikeBucket(MemoryStore(), scale=1e-6)
        store = S3LikeStore(bucket, latency=(0.0, 0.001), seed=1, adaptive=False)
        results = await asyncio.gather(
            store.put_if_absent("a/1", b"x"),
            store.put_if_absent("a/2", b"x"),
            return_exceptions=True,
        )
        await store.put_if_absent("b/1", b"x")  # another prefix has its own
        await store.get("a/1")  # and reads their own
        return bucket, results

    bucket, results = asyncio.run(two_writes())
    assert sum(isinstance(r, SlowDown) for r in results) == 1  # refused five times, then raised
    assert bucket.slowdowns == {"write a": RetryPolicy().attempts}
    assert bucket.counts == {"write a": 1, "write b": 1, "read a": 1}


def refusals(seed: int) -> list[str]:
    """What the bucket answers 200 conditional writes to 20 keys, one after another."""
    bucket = S3LikeBucket(
        MemoryStore(), scale=None, conflicts=0.2, conflict_burst=3, slowdowns=0.1, seed=seed
    )

    async def write(key: str) -> str:
        try:
            await bucket.serve("write", key, lambda: bucket.inner.put(key, b"x"), conditional=True)
        except WriteConflict:
            return "409"
        except SlowDown:
            return "503"
        return "200"

    async def writes() -> list[str]:
        return [await write(f"k/{n % 20}") for n in range(200)]

    return asyncio.run(writes())


def test_the_s3_like_bucket_refuses_the_same_requests_in_every_run_of_a_seed() -> None:
    first = refusals(seed=5)
    assert refusals(seed=5) == first
    assert refusals(seed=6) != first
    assert 0.05 < first.count("503") / 200 < 0.2
    assert 0.2 < first.count("409") / 200 < 0.6  # (each first 409 of a key brings two more)


def test_conflicts_in_the_s3_like_bucket_are_decided_by_its_clients_and_nothing_fails() -> None:
    async def run() -> tuple[S3LikeBucket, list[str]]:
        bucket = S3LikeBucket(MemoryStore(), scale=None, conflicts=0.3, conflict_burst=3, seed=2)
        store = S3LikeStore(bucket, latency=(0.0, 0.001), seed=3, adaptive=False)
        etags = [await store.put_if_absent(f"k/{n}", b"x") for n in range(30)]
        etags = [await store.put_if_match(f"k/{n}", b"y", e) for n, e in enumerate(etags)]
        for n, etag in enumerate(etags):
            await store.delete(f"k/{n}", if_match=etag)
        return bucket, [info.key async for info in store.scan("k/")]

    bucket, left = asyncio.run(run())
    assert bucket.conflicted["k"] > 10
    assert left == []


def test_the_s3_like_bucket_can_allow_one_write_a_second_to_an_object() -> None:
    now = [0.0]
    bucket = S3LikeBucket(MemoryStore(), scale=None, object_writes=1.0, clock=lambda: now[0])

    async def put(key: str) -> str:
        try:
            await bucket.serve("write", key, lambda: bucket.inner.put(key, b"x"))
        except SlowDown:
            return "429"
        return "200"

    async def run() -> list[str]:
        answers = [await put("slots/a"), await put("slots/a"), await put("slots/b")]
        now[0] += 1.0
        return [*answers, await put("slots/a")]

    assert asyncio.run(run()) == ["200", "429", "200", "200"]


def test_the_large_values_case_measures_each_phase_of_a_run(tmp_path: Path) -> None:
    """Every phase of a run of a large value (a MiB here) in its own child,
    against the same phase with a value of a few bytes."""
    from benchmarks.big_values import main as big_values

    out = tmp_path / "big.json"
    args = ["--mb", "1", "--backends", "file", "--values", "bytes", "--rounds", "1"]
    big_values([*args, "--out", str(out)])
    saved = json.loads(out.read_text())
    cases = [run for run in saved["runs"] if "phases" in run]
    assert [run["value"] for run in cases] == ["control", "bytes"]
    assert all(set(run["phases"]) == {"write", "replay", "result"} for run in cases)
    assert cases[1]["phases"]["result"]["payload"] > 2**20  # the outcome holds the value
    assert len(saved["summary"]) == 4  # three phases and the build


def test_a_hot_fleet_keeps_to_its_key_and_its_rate_and_runs_each_job_once() -> None:
    from benchmarks.hot_fleet import LIMIT, RATE, HotSpec, hot_fleet, most_overlapping, most_within

    assert most_overlapping([(0, 2), (1, 3), (2, 4)]) == 2  # (an end before a start at once)
    assert most_within([0.0, 0.5, 0.99, 1.0, 3.0], 1.0) == 3
    keyed = asyncio.run(hot_fleet(HotSpec("key", workers=2, object_writes=None, n=8)))
    assert keyed["done"] == keyed["finished_exactly_once"] == 8
    assert 0 < keyed["max_in_code_at_once"] <= LIMIT
    assert keyed["writes_per_run"]["CPUT slots"] > 0
    rated = asyncio.run(hot_fleet(HotSpec("rate", workers=2, object_writes=None, n=4)))
    assert rated["done"] == rated["finished_exactly_once"] == 4
    assert rated["allowed_runs_per_s"] == RATE and rated["max_starts_within_10s"] <= 4


def test_stream_case_reads_every_item_in_another_process(tmp_path: object) -> None:
    r = run_one(Spec("stream", "file", n=5, pause=0.01, window=0.2, workdir=str(tmp_path)))
    assert r["items"] == 5
    assert r["p50_ms"] >= 0 and r["max_ms"] >= r["p50_ms"]
    # each write is a memo and an item, each created once
    assert r["writer_requests_per_item"]["CONDITIONAL_PUT"] >= 2
    assert r["reader_requests_per_item"]["GET"] >= 1


def test_debounce_costs() -> None:
    from benchmarks.debounce import one

    alone = asyncio.run(one("memory", 1, 20))
    # One swap a submit, and the window's opening: its run's enqueue and the mark.
    assert alone["submits"] == 20 and alone["per_submit"]["CPUT"] == (20 + 2) / 20
    assert alone["areas"]["CPUT debounce"] == 21 and "GET debounce" not in alone["areas"]


def test_payload_codecs_case_seals_opens_and_runs(tmp_path: object) -> None:
    from benchmarks.payload_codecs import CHAINS, measure_codecs, one_run

    rows = measure_codecs(1, volume=1)
    assert {row["chain"] for row in rows} == set(CHAINS)
    assert all(0 < row["ratio"] < 1.1 for row in rows)
    zstd = {row["payload"]: row["ratio"] for row in rows if row["chain"] == "zstd-3"}
    assert zstd["json-4MiB"] < 0.5 and zstd["random-1MiB"] >= 1.0
    run = asyncio.run(one_run(3, CHAINS["zstd-3+aes-gcm"]()))
    assert run["jobs_per_s"] > 0 and run["stored_bytes"] > 0


def test_fairness_case_runs(tmp_path: Path) -> None:
    from benchmarks.fairness import B_JOBS, one

    for backend in ("memory", "file"):
        for late in (False, True):
            row = asyncio.run(one(backend, 60, True, 30.0, None, late))
            assert not row["capped"] and row["runs_before_last_b"] <= 2 * B_JOBS + 16, row
