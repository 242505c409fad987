"""Export files: JSONL (one row per line) and Parquet (pyarrow, one row group per page).

The Parquet schema is explicit, so that an empty export, or a page where every value of a column
is null, still has the same column types; times are UTC microseconds. The file is written to
`<name>.partial` and renamed when closed whole, like a backup.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from services.errors import OrgmemError

_TIME = pa.timestamp("us", tz="UTC")
_STRINGS = pa.list_(pa.string())

HISTORY_TYPE = pa.struct([
    ("position", pa.int64()), ("at", _TIME), ("change", pa.string()), ("state", pa.string()),
    ("superseded_by", pa.string()), ("run_id", pa.string()), ("reason", pa.string()),
])

ROW_SCHEMA = pa.schema([
    pa.field("row_id", pa.string(), nullable=False), pa.field("tenant", pa.string(), nullable=False),
    pa.field("text", pa.string(), nullable=False), pa.field("author", pa.string()),
    pa.field("event_time", _TIME), pa.field("kind", pa.string()), pa.field("thread", pa.string()),
    pa.field("title", pa.string()), pa.field("tags", _STRINGS), pa.field("participants", _STRINGS),
    pa.field("acl", _STRINGS), pa.field("source", pa.string()), pa.field("source_id", pa.string()),
    pa.field("ingest_position", pa.int64(), nullable=False), pa.field("ingested_at", _TIME, nullable=False),
    pa.field("state", pa.string(), nullable=False), pa.field("superseded_by", pa.string()),
    pa.field("derived_from", _STRINGS), pa.field("parent", pa.string()), pa.field("history", pa.list_(HISTORY_TYPE)),
])


class _PartialFile:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        if self.path.exists():
            raise OrgmemError(f"export: {self.path} exists; name a new file")

    def finish(self) -> None:
        self.partial.rename(self.path)

    def abandon(self) -> None:
        self.partial.unlink(missing_ok=True)


class JsonlFile(_PartialFile):
    def __init__(self, path: Path, encode: Callable[[dict], str]):
        super().__init__(path)
        self._encode = encode
        self._handle = open(self.partial, "w", encoding="utf-8")

    def write(self, records: Sequence[dict]) -> None:
        self._handle.write("".join(self._encode(r) for r in records))

    def close(self, complete: bool = True) -> None:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()
        self.finish() if complete else self.abandon()


class ParquetFile(_PartialFile):
    def __init__(self, path: Path, metadata: dict[str, str] | None = None):
        super().__init__(path)
        schema = ROW_SCHEMA.with_metadata({f"orgmem.{k}": str(v) for k, v in (metadata or {}).items()})
        self._writer = pq.ParquetWriter(self.partial, schema, compression="zstd")
        self._schema = schema

    def write(self, records: Sequence[dict]) -> None:
        self._writer.write_table(pa.Table.from_pylist(list(records), schema=self._schema))

    def close(self, complete: bool = True) -> None:
        self._writer.close()
        self.finish() if complete else self.abandon()
