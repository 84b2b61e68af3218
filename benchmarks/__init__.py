"""Benchmarks: `python -m benchmarks.<name>`."""
import dreamer  # noqa: F401  first: dreamer/mkl_amd.py must act before torch is imported
