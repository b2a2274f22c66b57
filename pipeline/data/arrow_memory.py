"""The allocator behind Arrow's buffers in pcqr's own processes (the ``pcqr`` command and the local
cluster's worker processes it starts).

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

import os

import pyarrow as pa

POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def prefer_system_pool() -> None:
    """This process's Arrow buffers from the system allocator, and those of the worker processes it
    starts (they inherit the environment), unless ``ARROW_DEFAULT_MEMORY_POOL`` names a pool."""
    if os.environ.get(POOL_VARIABLE):
        return
    os.environ[POOL_VARIABLE] = "system"
    pa.set_memory_pool(pa.system_memory_pool())
