"""Benchmarks: `python -m benchmarks.<name>`. Each is an entry point: the process is set up first
(before any benchmark imports torch: dreamer/runtime.py)."""
from dreamer.runtime import setup

setup()
