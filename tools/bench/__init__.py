"""Benchmarks that print figures (JSON with --json)."""
