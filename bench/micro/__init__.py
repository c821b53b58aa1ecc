"""Micro benchmarks (pytest-benchmark); see docs/performance.md."""
