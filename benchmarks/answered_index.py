"""Benchmark ``answered_index``: the answered-queries index alone (pipeline/public_log/answered.py) as the
answer loop uses it -- per batch of 10^5 fresh queries, one lookup then one insert -- at 10^6, 10^7 and
10^8 answered queries: the process's peak RSS and the time per batch at the end of the stream.

Each size runs in a fresh Python process (its peak RSS is its own VmHWM: ``ru_maxrss`` would carry
the benchmark process's peak across exec). Issue 32's aim is
the driver's memory flat from 10^6 to 10^8 queries (x1.05 at most); the index was the one part that
grew (8 bytes a query in memory, twice that while merging). Run through benchmarks/run.py
(``--only answered_index``); benchmarks/README.md says what each figure means."""
from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from harness import ROOT, log

_CHILD = r"""
import json, sys, time
import numpy as np
def peak_mb():  # VmHWM: this process's own peak (ru_maxrss carries the parent's across exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
from pcqr.pipeline.public_log.answered import AnsweredIndex
total, batch = int(sys.argv[1]), 100_000
rng = np.random.default_rng(7)
index = AnsweredIndex()
start = time.perf_counter()
last = []
for done in range(0, total, batch):
    keys = rng.integers(0, 2**64 - 1, batch, dtype=np.uint64, endpoint=True)
    labels = (keys & np.uint64(2)).astype(np.int8)
    t = time.perf_counter()
    found, _ = index.lookup(keys)
    index.add(keys[~found], labels[~found], absent=True)
    last = (last + [time.perf_counter() - t])[-10:]
print(json.dumps({"entries": len(index), "memory_bytes": index.nbytes, "disk_bytes": index.disk_bytes,
                  "seconds": time.perf_counter() - start, "seconds_per_batch_at_end": sum(last) / len(last),
                  "peak_rss_mb": peak_mb()}))
index.close()
"""


def bench_answered_index(quick: bool) -> dict[str, Any]:
    sizes = (10**6, 10**7) if quick else (10**6, 10**7, 10**8)
    result: dict[str, Any] = {"batch": 100_000, "how": "one lookup then one insert of 10^5 fresh keys per batch, "
                              "in a fresh process per size; peak RSS is its VmHWM (/proc/self/status)", "runs": {}}
    for size in sizes:
        log(f"answered_index: {size:,} answered queries")
        ran = subprocess.run([sys.executable, "-c", _CHILD, str(size)], cwd=ROOT, capture_output=True, text=True,
                             check=True)
        result["runs"][str(size)] = json.loads(ran.stdout.strip().splitlines()[-1])
    first, last = result["runs"][str(sizes[0])], result["runs"][str(sizes[-1])]
    result["peak_rss_ratio"] = round(last["peak_rss_mb"] / first["peak_rss_mb"], 3)
    result["aim"] = "peak RSS ratio <= 1.05 from 10^6 to 10^8 answered queries"
    return result
