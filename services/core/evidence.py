"""Evidence rendering (Mem++ §3.4): rows in rank order, each headed by date, author and kind."""

from __future__ import annotations

from collections.abc import Sequence

from schemas.rows import Row

UNDATED = "undated"


def row_header(rank: int, row: Row, show_supersession: bool = False) -> str:
    date = row.event_time.date().isoformat() if row.event_time else UNDATED
    parts = [f"[{rank}] {date}", row.author or "unknown author", row.kind]
    if row.thread:
        parts.append(f"thread {row.thread}")
    if show_supersession and row.superseded_by:
        parts.append(f"superseded by {row.superseded_by}")
    return " · ".join(parts)


def render_evidence(rows: Sequence[Row], show_supersession: bool = False) -> str:
    blocks = []
    for rank, row in enumerate(rows, start=1):
        title = f"{row.title}\n" if row.title else ""
        blocks.append(f"{row_header(rank, row, show_supersession)}\n{title}{row.text}")
    return "\n\n".join(blocks)
