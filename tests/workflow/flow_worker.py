"""A worker process for test_singleton_multiprocess and test_debounce_multiprocess:
``python flow_worker.py STORE_URL LEASE``; runs the singleton and debounce jobs
until SIGTERM, then drains."""

from __future__ import annotations

import asyncio
import sys

from debounce_jobs import Reindex
from limit_worker import serve
from singleton_jobs import SINGLETON_JOBS

if __name__ == "__main__":
    jobs = [*SINGLETON_JOBS, Reindex]
    asyncio.run(serve(sys.argv[1], float(sys.argv[2]), jobs, "flow", cancel_check=0.2))
