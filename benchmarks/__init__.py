"""stepstone's benchmark harness. Run ``python -m benchmarks.run`` (see run.py)."""
