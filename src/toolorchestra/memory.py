"""Handing freed heap memory back to the operating system: a leaf the trainer and `serve` both call."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any


@functools.cache
def _malloc_trim() -> Any:
    """glibc's malloc_trim, or None where the C library has none (macOS, musl)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def return_freed_memory() -> bool:
    """Hand the C heap's free pages back to the operating system (after a training step, or on an idle server);
    True where that was possible.

    A step frees activations and caches of many sizes (a ToolScale prompt is 3-7k tokens), and glibc keeps
    freed heap memory for reuse, fragmented. Without this the resident size of the ToolScale SFT run grew from
    4.7 GB to 8.8 GB in its first 7 steps and to 15 GB over 100; calling malloc_trim(0) in that process took it
    from 7.9 GB to 3.6 GB. With it, the same run falls back to 1.7-2.2 GB between steps (9 steps measured); a
    step's own peak, its working set, is unchanged: up to 10.1 GB for the longest domain prompt (2026-11-26)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
