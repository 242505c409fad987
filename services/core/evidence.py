"""Evidence rendering (Mem++ §3.4): rows in rank order, each headed by date, author and kind, and
by its version of its thread where it has others or was contradicted (`services.core.versions`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from schemas.rows import Row
from services.core.versions import Version, describe

UNDATED = "undated"


def row_header(rank: int, row: Row, show_supersession: bool = False, version: Version | None = None) -> str:
    date = row.event_time.date().isoformat() if row.event_time else UNDATED
    parts = [f"[{rank}] {date}", row.author or "unknown author", row.kind]
    if row.thread:
        parts.append(f"thread {row.thread}")
    if version is not None:  # its line names, as "contradicted by", the pointers the view holds
        line = describe(version)
        header = " · ".join(parts)
        return f"{header}\n{line}" if line else header
    if show_supersession and row.superseded_by:
        parts.append(f"superseded by {row.superseded_by}")
    return " · ".join(parts)


def render_evidence(rows: Sequence[Row], show_supersession: bool = False,
                    versions: Mapping[str, Version] | None = None) -> str:
    """`versions` (row id -> version in the caller's view) adds each row's version line under its
    header; with them, a row's stored pointer is never shown (the view may not hold its row)."""
    blocks = []
    for rank, row in enumerate(rows, start=1):
        title = f"{row.title}\n" if row.title else ""
        header = row_header(rank, row, show_supersession) if versions is None else \
            row_header(rank, row, version=versions.get(row.row_id))
        blocks.append(f"{header}\n{title}{row.text}")
    return "\n\n".join(blocks)
