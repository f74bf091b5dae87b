"""Duplicate storms (guarantee 1): four processes submit the same 20 keys 50
times each, all at once, while two workers run them. Each key makes exactly
one run: one id, one newly_submitted handle, one execution of each step.

On S3 (moto, a smaller and slower storm: its server answers a few hundred
requests a second) the submits take a remote store's order, creating before
they look (stepstone.workflow.submitting): submits that come after a key's
run ended in a worker make records that are taken back, racing the workers
that may claim them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from rel_jobs import open_rel_store, read_events
from rel_support import HERE, Workers, wait_for

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Storm:
    keys: list[int]
    submitters: int
    repeats: int
    in_flight: int
    """Submits each submitter has under way at once."""
    lease: float
    """The workers' lease: long enough that none lapses while the storm
    slows the store (a lapsed lease lets a step run again, as it may)."""


STORMS = {
    "files": Storm(list(range(20)), 4, 50, 32, 2.0),
    # (few at a time: many submits come after their key's run ended in a
    # worker process, so their records are made and taken back)
    "s3": Storm(list(range(8)), 3, 8, 2, 20.0),
}


def _submitter(out: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(out.with_suffix(".log"), "wb") as log:
        return subprocess.Popen(
            [sys.executable, str(HERE / "rel_submit.py"), str(out)],
            env=env,
            stderr=log,
            cwd=str(HERE),
        )


@pytest.fixture(params=[*sorted(STORMS), "real_s3"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the store is: a directory, or an S3 URL on the moto server or
    on a real server (CI: Ceph RGW 16)."""
    if request.param == "files":
        return str(tmp_path / "store")
    url: str = request.getfixturevalue("real_s3_url" if request.param == "real_s3" else "s3_url")
    return url


async def test_a_storm_of_duplicates_makes_one_run_per_key(tmp_path: Path, location: str) -> None:
    storm = STORMS["s3" if "://" in location else "files"]
    events, go = tmp_path / "events.log", tmp_path / "go"
    pool = Workers(location, events, tmp_path / "logs", REL_LEASE=str(storm.lease))
    env = {
        **pool.env,
        "REL_KEYS": ",".join(map(str, storm.keys)),
        "REL_REPEATS": str(storm.repeats),
        "REL_GO": str(go),
        "REL_INFLIGHT": str(storm.in_flight),
    }
    outs = [tmp_path / f"submitter-{i}.json" for i in range(storm.submitters)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(2):
            await pool.ready(pool.start())
        procs = [_submitter(out, env) for out in outs]
        go.touch()
        await wait_for(
            lambda: all(p.poll() is not None for p in procs), 90, "the submitters to finish"
        )
        assert [p.returncode for p in procs] == [0] * storm.submitters, [
            o.with_suffix(".log").read_text()[-2000:] for o in outs
        ]
        await pool.stop_all()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        pool.kill_all()

    reports = [json.loads(out.read_text()) for out in outs]
    ids: dict[str, set[str]] = {}
    for report in reports:
        for n, runs in report["ids"].items():
            assert len(runs) == storm.repeats
            ids.setdefault(n, set()).update(runs)
    assert sorted(ids) == sorted(str(n) for n in storm.keys)
    assert all(len(runs) == 1 for runs in ids.values()), "one key got two run ids"
    run_ids = {next(iter(runs)) for runs in ids.values()}
    newly = sum(report["new"] for report in reports)
    assert newly == len(storm.keys), f"{newly} submits said newly_submitted, not {len(storm.keys)}"

    execs = Counter((e[1], e[2]) for e in read_events(str(events)) if e[0] == "EXEC")
    runs = {run for run, _ in execs}
    print(
        f"\nduplicate storm: {storm.submitters * len(storm.keys) * storm.repeats} submits"
        f" of {len(storm.keys)} keys -> {len(runs)} runs, {sum(execs.values())} step executions"
    )
    assert runs == run_ids, "a run executed that no key names, or a key's run never ran"
    assert set(execs.values()) == {1}, f"steps executed twice: {execs.most_common(3)}"
    assert len(execs) == 3 * len(storm.keys)
    # Every process got the same answer for a key: the one outcome.
    for run in run_ids:
        answers = {json.dumps(report["results"][run]) for report in reports}
        assert len(answers) == 1, f"run {run} answered differently: {answers}"
    store = open_rel_store(location)
    try:
        outcomes = [info.key.removeprefix("outcomes/") async for info in store.scan("outcomes/")]
        assert sorted(outcomes) == sorted(run_ids)
        assert [info.key async for info in store.scan("queue/jobs/")] == [], "a record was left"
    finally:
        await store.close()
