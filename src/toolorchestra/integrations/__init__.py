"""Bridges to third-party benchmarks and tools (each imports its third-party package only when used)."""
