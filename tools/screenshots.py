"""Retake the web console's screenshots in docs/img/ from a realistic demo store.

    python tools/screenshots.py             # writes docs/img/ui-*.png
    python tools/screenshots.py --out DIR   # somewhere else, to look first

It builds what an operator of a small shop would see: on a bucket of moto's S3
server (``s3://acme-jobs/prod``), a worker that ran the last hour's work and
stopped (charges, one retried after the card network timed out and one
declined, shipments, refunds, onboardings, a monthly invoicing run and its
children) and two workers still running, holding long exports and an account
sync while another waits for its slot; schedules; then ``stepstone ui`` on it,
read by Debian's headless Chromium (``apt-get install -y chromium
chromium-driver``), one picture a page. The throughput page is drawn from a
directory seeded with a day of finished runs (``benchmarks.ui_scale``), since a
bucket's objects cannot be dated back.

Look at every picture before committing it. Needs the test and ui extras
(moto, selenium; starlette, uvicorn, jinja2).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # benchmarks.ui_scale, for the throughput page's day of runs

from benchmarks.ui_scale import seed  # noqa: E402
from stepstone import JobRunner, SubmitOptions  # noqa: E402
from stepstone.testing import moto_server, wait_until  # noqa: E402

SHOP = Path(__file__).with_name("demo_shop.py")
BUCKET = "acme-jobs"
DEADLINE = 60.0
shop: Any = None
"""The demo application's module, once loaded (:func:`load_shop`)."""
WINDOW = (1280, 860)


# -- the demo store ------------------------------------------------------------------


def load_shop(work: Path) -> Any:
    """tools/demo_shop.py as the module ``shop.jobs``, from ``shop/jobs.py``
    under ``work`` (the current directory): what a traceback names."""
    (work / "shop").mkdir()
    (work / "shop" / "jobs.py").write_text(SHOP.read_text())
    module = types.ModuleType("shop.jobs")
    module.__file__ = "shop/jobs.py"
    sys.modules["shop.jobs"] = module
    exec(compile(SHOP.read_text(), "shop/jobs.py", "exec"), module.__dict__)
    return module


def runner(url: str, worker_id: str, **options: Any) -> JobRunner:
    return JobRunner(
        url,
        jobs=shop.JOBS,
        schedules=shop.SCHEDULES,
        worker_id=worker_id,
        retry_backoff=0.5,
        poll_interval=0.05,
        drain_timeout=1.0,
        **options,
    )


async def build(url: str) -> dict[str, str]:
    """Fill the store; returns the ids of the runs the pictures show."""
    shown: dict[str, str] = {}
    rng = random.Random(7)
    # The last hour's work, done by a worker that then stopped.
    async with runner(url, "batch-0", concurrency=16) as batch:
        charges = {
            n: await batch.submit(
                shop.ChargeOrder(order=f"o-{n}", cents=rng.randrange(900, 25_000))
            )
            for n in range(1031, 1050)
            if n != 1047
        }
        ships = [await batch.submit(shop.ShipOrder(order=f"o-{n}")) for n in range(1031, 1041)]
        monthly = await batch.submit(shop.MonthlyInvoicing(month="2026-11"))
        cancelled = await batch.submit(shop.RefundOrder(order="o-1019", cents=4500))
        for handle in [*charges.values(), *ships, monthly]:
            await handle.join(timeout=DEADLINE)
        await cancelled.cancel()
        refund = await batch.submit(shop.RefundOrder(order="o-1036", cents=2300))
        onboarding = [
            await batch.submit(shop.Onboarding(user=f"{name}@example.com"))
            for name in ("ada", "grace", "linus")
        ]
        in_two_hours = SubmitOptions(run_at=datetime.now(UTC) + timedelta(hours=2))
        later = await batch.submit(shop.ShipOrder(order="o-1050"), in_two_hours)

        async def waiting() -> bool:
            states = [await batch.status(h.id) for h in (refund, *onboarding)]
            waits = ("waiting_for_event", "sleeping")
            return all(s is not None and s.status in waits for s in states)

        await wait_until(waiting, timeout=DEADLINE)
        declined = await batch.submit(shop.ChargeOrder(order="o-1047", cents=8900))
        await declined.join(timeout=DEADLINE)
    shown["retried"] = charges[1042].id
    shown["declined"] = declined.id
    shown["refund"] = refund.id
    shown["later"] = later.id
    return shown


def start_worker(url: str, work: Path, name: str, concurrency: int) -> subprocess.Popen[bytes]:
    """``stepstone worker shop.jobs:worker`` as a process of its own."""
    command = [sys.executable, "-m", "stepstone", "worker", "shop.jobs:worker"]
    command += ["--worker-id", name, "--concurrency", str(concurrency), "--log-level", "ERROR"]
    env = {**os.environ, "STEPSTONE_STORE": url, "PYTHONPATH": str(work)}
    return subprocess.Popen(command, cwd=work, env=env)


@contextlib.asynccontextmanager
async def live_fleet(url: str, work: Path) -> Any:
    """Two worker processes (``stepstone worker shop.jobs:worker``) holding
    long runs, submitted from here as an API would, while the pictures are
    taken."""
    workers = [start_worker(url, work, name, n) for name, n in (("web-1", 16), ("batch-1", 8))]
    api = JobRunner(url, jobs=shop.JOBS, poll_interval=0.05)  # submits only
    try:
        handles = [
            await api.submit(shop.ExportReport(report=name))
            for name in ("orders-2026-11", "refunds-2026-11")
        ]
        handles += [await api.submit(shop.SyncAccount(account=a)) for a in ("initech", "initech")]

        async def held() -> bool:
            states = [await api.status(h.id) for h in handles]
            return sum(s is not None and s.status == "running" for s in states) == 3

        await wait_until(held, timeout=DEADLINE)
        yield
    finally:
        await api.close()
        for proc in workers:
            proc.terminate()
        for proc in workers:
            proc.wait(timeout=DEADLINE)


# -- the pictures ----------------------------------------------------------------------


@contextlib.contextmanager
def console(store: str, *options: str) -> Iterator[str]:
    """``stepstone ui STORE`` on a free port until the block ends; its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "stepstone", "ui", store, "--port", "0", "--refresh", "0", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"(http://\S+/)", line)
        if not found:
            raise SystemExit(f"stepstone ui said {line!r}")
        yield found.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=DEADLINE)


@contextlib.contextmanager
def chromium(profile: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if binary is None or driver is None:
        raise SystemExit("needs Debian's chromium and chromium-driver (apt-get install -y ...)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    browser = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    browser.set_page_load_timeout(DEADLINE)
    try:
        yield browser
    finally:
        browser.quit()


def shoot(browser: Any, path: Path, *, main_only: bool = False, height: int | None = None) -> None:
    """The window (or the page's ``main``), ``height`` pixels tall if given."""
    from selenium.webdriver.common.by import By

    browser.set_window_size(WINDOW[0], height or WINDOW[1])
    time.sleep(0.3)  # let the resize lay the page out again
    if main_only:
        assert browser.find_element(By.CSS_SELECTOR, "main").screenshot(str(path))
    else:
        assert browser.save_screenshot(str(path))
    browser.set_window_size(*WINDOW)
    print(f"wrote {path}")


def search(browser: Any, text: str) -> None:
    from selenium.webdriver.common.by import By

    box = browser.find_element(By.CSS_SELECTOR, "header form input")
    box.clear()
    box.send_keys(text + "\n")


def until_shown(browser: Any, url: str, selector: str, what: str, count: int = 1) -> None:
    """Load ``url`` again until ``count`` elements match ``selector``."""
    from selenium.webdriver.common.by import By

    def shown() -> bool:
        browser.get(url)
        return len(browser.find_elements(By.CSS_SELECTOR, selector)) >= count

    wait_for(shown, what, timeout=150.0)


def wait_for(condition: Any, what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


async def take(out: Path, work: Path) -> None:
    from selenium.webdriver.common.by import By

    global shop
    shop = load_shop(work)

    with moto_server() as endpoint:
        import boto3

        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
            Bucket=BUCKET
        )
        url = f"s3://{BUCKET}/prod?endpoint_url={endpoint}&region=us-east-1"
        shown = await build(url)
        async with live_fleet(url, work):
            with console(url, "--allow-actions") as ui, chromium(work / "profile") as browser:
                browser.get(ui)
                shoot(browser, out / "ui-runs.png", height=1000)
                search(browser, "charge:o-104")
                wait_for(lambda: "q=charge" in browser.current_url, "the search's list")
                shoot(browser, out / "ui-search.png")
                browser.get(f"{ui}runs/{shown['retried']}")
                shoot(browser, out / "ui-run.png", main_only=True, height=1800)
                browser.get(f"{ui}runs/{shown['refund']}")
                form = browser.find_element(By.CSS_SELECTOR, "nav.actions form.event")
                form.find_element(By.NAME, "payload").send_keys('{"approved": true, "by": "maria"}')
                form.find_element(By.CSS_SELECTOR, "button").click()
                wait_for(lambda: "/act/event" in browser.current_url, "the confirmation")
                shoot(browser, out / "ui-confirm.png")
                # A schedule's first tick, and the live workers' beats naming their runs.
                until_shown(browser, f"{ui}schedules", "td.run a", "a schedule's run")
                shoot(browser, out / "ui-schedules.png")
                until_shown(browser, f"{ui}workers", "td.held a", "the workers' held runs", count=3)
                shoot(browser, out / "ui-workers.png")
    day = seed(
        work / "day", finished=900, live=10, now=time.time(), rng=random.Random(9), spread=86400
    )
    with console(str(day.root)) as ui, chromium(work / "profile-2") as browser:
        browser.get(f"{ui}throughput")
        shoot(browser, out / "ui-throughput.png", main_only=True)


def main() -> None:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server: one line a request
    logging.getLogger("stepstone").setLevel(logging.CRITICAL)  # the demo's failures are meant
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stepstone-screenshots-") as work:
        os.chdir(work)
        asyncio.run(take(out, Path(work)))


if __name__ == "__main__":
    main()
