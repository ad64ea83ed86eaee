"""Benchmarks: scripts that time real code paths on generated data (never timed tests)."""
