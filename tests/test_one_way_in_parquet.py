"""One way in for Parquet (issue 27): no module of pipeline/ or jobs/ but the opener
(pipeline/data/parquet_opener.py) calls pyarrow's Parquet or dataset readers; everything else asks the
opener, which refuses special files and bounds the footer before parsing it."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPENER = ROOT / "pipeline" / "data" / "parquet_opener.py"

#: pyarrow's readers of Parquet files and datasets (writers are not inputs).
READERS = re.compile(
    r"\b(?:pq|parquet)\.(?:read_table|read_pandas|read_metadata|read_schema|ParquetFile|ParquetDataset)\b"
    r"|\bpyarrow\.parquet\.(?:read_table|read_metadata|read_schema|ParquetFile|ParquetDataset)\b"
    r"|\b(?:ds|pads|dataset)\.(?:dataset|parquet_dataset|FileSystemDataset)\s*\("
    r"|\bimport\s+pyarrow\.dataset\b|\bfrom\s+pyarrow\s+import\s+dataset\b|\bfrom\s+pyarrow\.dataset\s+import\b"
    r"|\bfrom\s+pyarrow\.parquet\s+import\s+(?:.*\b(?:read_table|read_metadata|read_schema|ParquetFile)\b)"
)


def _modules() -> list[Path]:
    return sorted(p for folder in ("pipeline", "jobs", "src") for p in (ROOT / folder).rglob("*.py"))


def test_no_module_but_the_opener_reads_parquet() -> None:
    offenders = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
                 for path in _modules() if path != OPENER
                 for number, line in enumerate(path.read_text().splitlines(), 1) if READERS.search(line)]
    assert not offenders, "Parquet read outside the opener:\n" + "\n".join(offenders)


def test_the_pattern_finds_what_it_must() -> None:
    for line in ("t = pq.read_table(path)", "pq.ParquetFile(path)", "meta = pq.read_metadata(p)",
                 "pq.read_schema(p).metadata", "import pyarrow.dataset as ds", "ds.dataset(uri)",
                 "from pyarrow.parquet import ParquetFile", "pyarrow.parquet.read_table(p)"):
        assert READERS.search(line), line
    for line in ("pq.write_table(t, sink)", "pq.ParquetWriter(path, schema)", "read_parquet(path)"):
        assert not READERS.search(line), line
    assert READERS.search(OPENER.read_text())  # the opener itself is where they are
