"""Duplicate storms (guarantee 1): four processes submit the same 20 keys 50
times each, all at once, while two workers run them. Each key makes exactly
one run: one id, one newly_submitted handle, one execution of each step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from rel_jobs import read_events
from rel_support import HERE, Workers, wait_for

pytestmark = pytest.mark.slow

KEYS = list(range(20))
SUBMITTERS = 4
REPEATS = 50


def _submitter(out: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(out.with_suffix(".log"), "wb") as log:
        return subprocess.Popen(
            [sys.executable, str(HERE / "rel_submit.py"), str(out)],
            env=env,
            stderr=log,
            cwd=str(HERE),
        )


async def test_a_storm_of_duplicates_makes_one_run_per_key(tmp_path: Path) -> None:
    root, events = tmp_path / "store", tmp_path / "events.log"
    go = tmp_path / "go"
    pool = Workers(root, events, tmp_path / "logs")
    env = {
        **pool.env,
        "REL_KEYS": ",".join(map(str, KEYS)),
        "REL_REPEATS": str(REPEATS),
        "REL_GO": str(go),
    }
    outs = [tmp_path / f"submitter-{i}.json" for i in range(SUBMITTERS)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(2):
            await pool.ready(pool.start())
        procs = [_submitter(out, env) for out in outs]
        go.touch()
        await wait_for(
            lambda: all(p.poll() is not None for p in procs), 90, "the submitters to finish"
        )
        assert [p.returncode for p in procs] == [0] * SUBMITTERS, [
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
            assert len(runs) == REPEATS
            ids.setdefault(n, set()).update(runs)
    assert sorted(ids) == sorted(str(n) for n in KEYS)
    assert all(len(runs) == 1 for runs in ids.values()), "one key got two run ids"
    run_ids = {next(iter(runs)) for runs in ids.values()}
    newly = sum(report["new"] for report in reports)
    assert newly == len(KEYS), f"{newly} submits said newly_submitted, not {len(KEYS)}"

    execs = Counter((e[1], e[2]) for e in read_events(str(events)) if e[0] == "EXEC")
    runs = {run for run, _ in execs}
    print(
        f"\nduplicate storm: {SUBMITTERS * len(KEYS) * REPEATS} submits of {len(KEYS)} keys "
        f"-> {len(runs)} runs, {sum(execs.values())} step executions"
    )
    assert runs == run_ids, "a run executed that no key names, or a key's run never ran"
    assert set(execs.values()) == {1}, f"steps executed twice: {execs.most_common(3)}"
    assert len(execs) == 3 * len(KEYS)
    # Every process got the same answer for a key: the one outcome.
    for run in run_ids:
        answers = {json.dumps(report["results"][run]) for report in reports}
        assert len(answers) == 1, f"run {run} answered differently: {answers}"
    assert sorted(os.listdir(root / "outcomes")) == sorted(run_ids)
