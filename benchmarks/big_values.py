"""Large step results: a run's peak memory and time as it records, replays
and answers a value of many megabytes, on a SQLite file, on files and on S3 (moto).

``python -m benchmarks.big_values [--mb 100] [--backends sqlite,file,s3]
[--values bytes,text,rows] [--rounds 3] [--out FILE]``

Each case is one run of ``BigValue`` (in ``benchmarks.big_values_app``),
whose one step returns the value and whose result is that value, so both
its memo and its outcome record hold it. The run goes through three child
processes, one phase each, so that each phase's peak is its own:

- **write**: a worker runs the step, which builds the value and returns it;
  once its memo is written the job kills its own process (SIGKILL), as a
  crash would, before the outcome;
- **replay**: a worker of the same id takes the run back at once
  (:mod:`stepstone.runtime.worker.identity`), replays the step from its memo
  (reads it back, decodes it) and records the outcome, which holds the value;
- **result**: an API process (a runner with no worker) reads the result
  through the run's handle.

The values: ``bytes`` (a ``bytes`` result), ``text`` (a pydantic model with
one ``str`` field) and ``rows`` (a model holding a ``list[str]`` of
100-character strings): the payload is the value's encoded size.

**Peak memory is the child's own peak resident set** (``ru_maxrss`` of
``RUSAGE_SELF``, reported by the child as it ends; the write phase's job
writes it down just before it kills itself), less the same phase's lowest
peak with a value of a few bytes (the ``control`` rows): what the value costs
the process, in everything it holds (the C buffers of msgpack, aiohttp
and the file reads included), which tracemalloc, counting Python's
allocations only, would miss. ``os.wait4``'s figure, which counts the
child's own children too, is kept
beside it. moto runs in a process of its own (benchmarks.moto_server),
started by this one, so its memory is in neither.
``build`` is a child that only builds the value (no step, no store): the
value's own size in memory, which for ``rows`` is well above its payload.

Stores are fresh (a SQLite file or a directory under the system's temp directory, or a
bucket on a moto server of its own per round) and removed at the end.
Figures go to docs/performance.md with the commit; the history to
benchmarks/NOTES.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

from .moto_server import MotoServer
from .pickup import commit

PHASES = ("write", "replay", "result")
VALUES = ("bytes", "text", "rows")
CHILD_TIMEOUT = 600.0


def _child(phase: str, store: str, value: str, mb: float, env: dict[str, str]) -> dict[str, Any]:
    """Run one phase in a child process; its peak RSS (MiB) and wall time (s)."""
    started = time.monotonic()
    handle, peak_file = tempfile.mkstemp(prefix="stepstone-big-peak-")
    os.close(handle)
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.big_values_app", phase, store, value, str(mb)],
        env=env | {"BIG_VALUES_PEAK": peak_file},
        stdout=subprocess.PIPE,
    )
    deadline = started + CHILD_TIMEOUT
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{phase} of {value} on {store} took over {CHILD_TIMEOUT} s")
        time.sleep(0.01)
    seconds = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.stdout is not None
    said = proc.stdout.read().decode().strip()
    killed = proc.returncode == -9
    if proc.returncode != 0 and not (phase == "write" and killed):
        raise RuntimeError(f"{phase} of {value} on {store} exited {proc.returncode}: {said}")
    report = json.loads(said.splitlines()[-1]) if said else {}
    with open(peak_file, encoding="utf-8") as f:
        written = f.read()
    os.unlink(peak_file)
    own = report.get("peak_mib") or (float(written) if written else None)
    return {
        "peak_mib": own,
        "peak_with_children_mib": usage.ru_maxrss / 1024,
        "seconds": seconds,
        "phase_seconds": report.get("seconds"),
        "payload": report.get("payload"),
    }


def _one_case(backend: str, value: str, mb: float, moto_url: str | None) -> dict[str, Any]:
    """The three phases of one run on a fresh store; the child's figures by phase."""
    env = dict(os.environ)
    directory = None
    if backend in ("file", "sqlite"):
        directory = tempfile.mkdtemp(prefix="stepstone-big-")
        store = directory
        if backend == "sqlite":
            store = os.path.join(directory, "jobs.db")
            open(store, "wb").close()  # (an empty file is an empty store)
    else:
        assert moto_url is not None
        bucket = f"big-{uuid.uuid4().hex[:12]}"
        env["AWS_ENDPOINT_URL_S3"] = moto_url
        import boto3

        boto3.client("s3", endpoint_url=moto_url, region_name="us-east-1").create_bucket(
            Bucket=bucket
        )
        store = f"s3://{bucket}?endpoint_url={moto_url}"
    try:
        out: dict[str, Any] = {}
        for phase in PHASES:
            out[phase] = _child(phase, store, value, mb, env)
        return out
    finally:
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=100.0, help="the value's payload, MiB")
    parser.add_argument("--backends", default="sqlite,file,s3")
    parser.add_argument("--values", default=",".join(VALUES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    backends = args.backends.split(",")
    values = args.values.split(",")
    from stepstone.testing import FAKE_AWS_ENV

    os.environ.update(FAKE_AWS_ENV)
    runs: list[dict[str, Any]] = []
    with MotoServer() if "s3" in backends else _Nothing() as moto_url:
        for round_ in range(args.rounds):
            for backend in backends:
                for value in values:
                    for label, mb in (("control", 0.0), (value, args.mb)):
                        if label == "control" and value != values[0]:
                            continue  # one control per backend and round
                        phases = _one_case(backend, value, mb, moto_url)
                        row = {"round": round_, "backend": backend, "value": label, "mb": mb}
                        runs.append(row | {"phases": phases})
                        print(json.dumps(row | _brief(phases)), flush=True)
            for value in values:
                build = _child("build", "memory://", value, args.mb, dict(os.environ))
                runs.append({"round": round_, "backend": "none", "value": value, "build": build})
                print(json.dumps({"round": round_, "build": value} | build), flush=True)
    summary = _summary(runs, args.mb)
    for line in summary:
        print(line)
    if args.out:
        load = os.getloadavg()
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "commit": commit(),
                    "mb": args.mb,
                    "load": load,
                    "runs": runs,
                    "summary": summary,
                },
                f,
                indent=1,
            )


def _brief(phases: dict[str, Any]) -> dict[str, Any]:
    return {p: (round(f["peak_mib"], 1), round(f["seconds"], 2)) for p, f in phases.items()}


def _summary(runs: list[dict[str, Any]], mb: float) -> list[str]:
    """Per backend, value and phase: the median peak over the control, as MiB
    and as a multiple of the payload, and the median time. The control is
    its lowest run (the process's footprint without the value, which some
    runs exceed at start-up), so a value's cost is never understated."""
    lines = []
    controls: dict[tuple[str, str], list[float]] = {}
    for run in runs:
        if run.get("value") == "control":
            for phase, f in run["phases"].items():
                controls.setdefault((run["backend"], phase), []).append(f["peak_mib"])
    cases: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for run in runs:
        if "phases" in run and run["value"] != "control":
            for phase, f in run["phases"].items():
                cases.setdefault((run["backend"], run["value"], phase), []).append(f)
    for (backend, value, phase), figures in sorted(cases.items()):
        base = min(controls[(backend, phase)])
        over = statistics.median(f["peak_mib"] for f in figures) - base
        payload = statistics.median(f["payload"] or mb * 2**20 for f in figures) / 2**20
        seconds = statistics.median(f["phase_seconds"] or f["seconds"] for f in figures)
        lines.append(
            f"{backend:6} {value:6} {phase:7} payload {payload:6.1f} MiB  "
            f"peak over control {over:7.1f} MiB = {over / payload:4.2f}x  "
            f"(control {base:5.1f} MiB)  {seconds:6.2f} s"
        )
    for run in runs:
        if "build" in run and run["round"] == 0:
            lines.append(f"build {run['value']:6} peak {run['build']['peak_mib']:7.1f} MiB")
    return lines


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    main()
