"""A throwaway single-node Ceph RADOS Gateway (RGW) for the test suite.

    python tools/rgw.py start [--dir DIR]   # prints the lines to export, e.g.
                                             # STEPSTONE_TEST_S3_URL=http://K:S@127.0.0.1:P
    python tools/rgw.py stop [--dir DIR]    # stops the processes start started

``start`` installs Debian's packages when they are missing (``apt-get``, as
root), then runs one monitor, one OSD keeping its data in memory
(``memstore``) and the gateway, as plain processes (no systemd), each in
its own session; writes their pids to ``DIR/pids``; creates an S3 user with
fresh keys; waits until a bucket can be made; and prints the test setting.
``stop`` sends SIGTERM, then SIGKILL, to exactly those pids (each checked
to still be the program it started) and removes the directory.

Why it is set up the way it is (measured on a 2-core machine):

- **No authentication inside the cluster** (``auth ... required = none``): a
  throwaway cluster on the loopback needs no keys between its daemons.
  The gateway then needs ``ms mon client mode = crc``: its default asks the
  monitor for a secure session that ``auth none`` cannot give, and it
  waits 300 s and says ``failed to fetch mon config``.
- **One OSD on memstore** (data in RAM, capped by ``memstore device
  bytes``), pools of one copy and 8 placement groups: nothing touches a
  disk, and start to a usable bucket takes about 16 s.
- **No manager daemon**: the gateway does not need one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

PACKAGES = ("radosgw", "ceph-mon", "ceph-osd", "ceph-common")
PROGRAMS = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool", "ceph")
DEFAULT_DIR = Path(tempfile.gettempdir()) / "stepstone-rgw"
START_LIMIT = 180.0
"""Seconds start waits for a usable gateway before it gives up (and stops what it started)."""

CONF = """\
[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{mon_port}
mon initial members = a
auth cluster required = none
auth service required = none
auth client required = none
auth supported = none
ms mon client mode = crc
ms bind ipv4 = true
ms bind ipv6 = false
public addr = 127.0.0.1
cluster addr = 127.0.0.1
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
run dir = {dir}/run
admin socket = {dir}/run/$name.asok
log file = {dir}/log/$name.log
pid file = {dir}/run/$name.pid
log to stderr = false
err to stderr = true

[mon.a]
mon data = {dir}/mon

[osd.0]
osd data = {dir}/osd
osd objectstore = memstore
memstore device bytes = {memstore_bytes}

[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:{rgw_port}
rgw data = {dir}/rgw
rgw dns name = 127.0.0.1
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def install() -> None:
    """Debian's packages, when a program is missing (as root)."""
    if all(shutil.which(p) for p in PROGRAMS):
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print("tools/rgw.py: installing " + " ".join(PACKAGES), file=sys.stderr)
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )


class Cluster:
    """The directory of one throwaway cluster, and the processes started in it."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.conf = directory / "ceph.conf"
        self.pids = directory / "pids"

    def ceph(self, *args: str, timeout: float = 60) -> str:
        """Run a ceph tool against this cluster; its output."""
        done = subprocess.run(
            [args[0], "-c", str(self.conf), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode:
            raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
        return done.stdout

    def spawn(self, name: str, *args: str) -> None:
        """Start a daemon in the foreground of its own session; note its pid."""
        log = open(self.dir / "log" / f"{name}.out", "ab")  # noqa: SIM115 - the child keeps it
        process = subprocess.Popen(
            [args[0], "-f", "-c", str(self.conf), *args[1:]],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        with self.pids.open("a") as f:
            f.write(f"{process.pid} {args[0]}\n")

    def started(self) -> list[tuple[int, str]]:
        if not self.pids.exists():
            return []
        out = []
        for line in self.pids.read_text().splitlines():
            pid, _, program = line.partition(" ")
            out.append((int(pid), program))
        return out


def wait_for(what: str, check: object, deadline: float) -> None:
    """Call ``check()`` until it returns true, or fail naming ``what``."""
    assert callable(check)
    while True:
        try:
            if check():
                return
        except Exception as exc:
            last = exc
        else:
            last = None
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready in {START_LIMIT:g} s ({last})")
        time.sleep(0.25)


def start(directory: Path, memstore_bytes: int) -> dict[str, str]:
    install()
    if directory.exists():
        stop(directory)
    cluster = Cluster(directory)
    for sub in ("run", "log", "mon", "osd", "rgw"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + START_LIMIT
    mon_port, rgw_port = free_port(), free_port()
    fsid = str(uuid.uuid4())
    cluster.conf.write_text(
        CONF.format(
            fsid=fsid,
            mon_port=mon_port,
            rgw_port=rgw_port,
            dir=directory,
            memstore_bytes=memstore_bytes,
        )
    )
    try:
        monmap = directory / "monmap"
        subprocess.run(
            ["monmaptool", "--create", "--fsid", fsid, "--addv", "a",
             f"[v2:127.0.0.1:{mon_port}]", str(monmap)],
            check=True,
            capture_output=True,
        )  # fmt: skip
        cluster.ceph("ceph-mon", "--mkfs", "-i", "a", "--monmap", str(monmap))
        cluster.spawn("mon", "ceph-mon", "-i", "a")
        wait_for("the monitor", lambda: cluster.ceph("ceph", "mon", "stat", timeout=10), deadline)
        osd_uuid = str(uuid.uuid4())
        osd_id = cluster.ceph("ceph", "osd", "new", osd_uuid).strip()
        cluster.ceph("ceph-osd", "-i", osd_id, "--mkfs", "--osd-uuid", osd_uuid)
        cluster.spawn("osd", "ceph-osd", "-i", osd_id)

        def osd_up() -> bool:
            status = json.loads(cluster.ceph("ceph", "osd", "stat", "-f", "json", timeout=10))
            return int(status.get("num_up_osds", 0)) >= 1

        wait_for("the OSD", osd_up, deadline)
        cluster.spawn("rgw", "radosgw", "-n", "client.rgw")
        access, secret = "stepstone" + secrets.token_hex(6), secrets.token_hex(20)

        def user() -> bool:
            cluster.ceph(
                "radosgw-admin", "user", "create", "--uid", "stepstone", "--display-name",
                "stepstone tests", "--access-key", access, "--secret-key", secret, timeout=30,
            )  # fmt: skip
            return True

        wait_for("the gateway's user", user, deadline)
        endpoint = f"http://127.0.0.1:{rgw_port}"
        wait_for("the gateway", lambda: _bucket_made(endpoint, access, secret), deadline)
    except BaseException:
        print(f"tools/rgw.py: start failed; logs in {directory / 'log'}", file=sys.stderr)
        _tail_logs(directory)
        stop(directory, keep=True)
        raise
    return {
        "STEPSTONE_TEST_S3_URL": f"http://{access}:{secret}@127.0.0.1:{rgw_port}",
        "STEPSTONE_RGW_DIR": str(directory),
    }


def _bucket_made(endpoint: str, access: str, secret: str) -> bool:
    """Whether the gateway makes (and removes) a bucket: the test's first request."""
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=10),
    )
    name = "stepstone-rgw-ready-" + secrets.token_hex(4)
    client.create_bucket(Bucket=name)
    client.delete_bucket(Bucket=name)
    return True


def _tail_logs(directory: Path) -> None:
    for log in sorted((directory / "log").glob("*")):
        lines = log.read_text(errors="replace").splitlines()[-15:]
        if lines:
            print(f"--- {log.name}", *lines, sep="\n", file=sys.stderr)


def _program_of(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def stop(directory: Path, *, keep: bool = False) -> None:
    """SIGTERM, then SIGKILL after 10 s, to each process ``start`` noted that
    still runs its program; then remove the directory (unless ``keep``)."""
    cluster = Cluster(directory)
    alive = [
        pid
        for pid, program in cluster.started()
        if (_program_of(pid) or "").startswith(Path(program).name[:15])
    ]
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _program_of(pid) is not None and _running(pid)]
        time.sleep(0.1)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if not keep:
        shutil.rmtree(directory, ignore_errors=True)


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting for its parent (the started daemons'
    parent is this script's earlier run, long gone: init reaps them)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the cluster's directory")
    parser.add_argument(
        "--memstore-mib", type=int, default=2048, help="the OSD's memory for objects (MiB)"
    )
    args = parser.parse_args()
    if args.action == "stop":
        stop(args.dir)
        return
    began = time.monotonic()
    settings = start(args.dir, args.memstore_mib << 20)
    print(f"tools/rgw.py: RGW up in {time.monotonic() - began:.1f} s", file=sys.stderr)
    for name, value in settings.items():
        print(f"{name}={value}")


if __name__ == "__main__":
    main()
