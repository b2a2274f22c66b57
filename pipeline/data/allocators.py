"""The allocators behind pcqr's memory: Arrow's pool in pcqr's own processes (the ``pcqr`` command and
the local cluster's worker processes it starts), and the C heap's free pages handed back while a long
stream is answered (:func:`trim_free_memory`).

pyarrow's default pool on Linux, mimalloc, hands freed memory back to the operating system within
milliseconds, and with transparent huge pages (``madvise``, the usual setting) takes it back as fresh
2 MB pages that the kernel must zero first. The answer loop frees and reallocates each batch's
buffers, so a 10^6-query ``pcqr answer`` (benchmarks/answer_logistic) spent 21% of its CPU in the
kernel zeroing pages (perf, 2026-11-27): 2.4 s of system time. With the system allocator (glibc's
malloc, which keeps reusing its heap) the same command took 1.2 s of system time and 3.3 s instead
of 4.2 s of wall time, at a lower peak memory (697 against 742 MB).

A user who chose a pool (``ARROW_DEFAULT_MEMORY_POOL``) keeps it. The Python API (pcqr.Session,
PrivateClassifier) runs in the user's process and leaves its allocator alone; an external cluster's
workers are the operator's (set ``ARROW_DEFAULT_MEMORY_POOL=system`` in their environment for the same
effect).
"""
from __future__ import annotations

import ctypes
import os
from functools import cache

import pyarrow as pa

POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def prefer_system_pool() -> None:
    """This process's Arrow buffers from the system allocator, and those of the worker processes it
    starts (they inherit the environment), unless ``ARROW_DEFAULT_MEMORY_POOL`` names a pool."""
    if os.environ.get(POOL_VARIABLE):
        return
    os.environ[POOL_VARIABLE] = "system"
    pa.set_memory_pool(pa.system_memory_pool())


@cache
def _malloc_trim() -> object | None:
    """glibc's ``malloc_trim``, or None (another C library: nothing to do). Looked up among the
    symbols this process has loaded already (``dlopen(NULL)``): ``ctypes.util.find_library`` would
    fork the whole driver (about 2 GB of address space by then) to run ``ldconfig -p``."""
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None


def trim_free_memory() -> None:
    """Hand the free pages of the C heap back to the operating system (glibc's ``malloc_trim(0)``;
    elsewhere nothing). With the system allocator every thread's arena keeps what it freed: after the
    validation pass over 10^8 queries the driver held about 95 MB of free heap, and what it held crept
    up over the stream's 1,000 batches. A few milliseconds; the answer loop calls it every
    TRIM_EVERY batches."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)  # type: ignore[operator]


#: Log batches between two :func:`trim_free_memory` calls of the answer loop.
TRIM_EVERY = 8
