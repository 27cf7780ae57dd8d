"""Metrics shared by training callbacks, benchmarks and reports."""
