"""The SQLite row store's records read back: a stored row or head as the domain's value, and a
scope as a SQL condition over `rows r`. Kept apart from the store so the store stays one class."""

from __future__ import annotations

import json

from schemas.rows import Row
from services.adapters.sqlite_common import decode_time, encode_time
from services.core.scope import Scope
from services.ports import RowHead


def json_list(value: str) -> list[str]:
    return [] if value == "[]" else json.loads(value)


def row_from(record: tuple) -> Row:
    (row_id, tenant, text, author, event_time, kind, thread, title, tags, participants, acl,
     source, source_id, position, ingested_at, state, superseded_by, derived_from, parent) = record
    # Validated again, which costs less than skipping it: pydantic-core parses the ISO times in
    # Rust (0.43 ms per 50 rows against 0.67 for model_construct with Python-side parsing).
    return Row(
        row_id=row_id, tenant=tenant, text=text, author=author, event_time=event_time,
        kind=kind, thread=thread, title=title, tags=json_list(tags),
        participants=json_list(participants), acl=json_list(acl), source=source,
        source_id=source_id, ingest_position=position, ingested_at=ingested_at,
        state=state, superseded_by=superseded_by, derived_from=json_list(derived_from), parent=parent,
    )


def head_from(record: tuple) -> RowHead:
    row_id, thread, position, event_time, ingested_at = record
    return RowHead(row_id, thread, position, decode_time(event_time), decode_time(ingested_at))


def scope_sql(scope: Scope) -> tuple[str, list]:
    """The scope as a SQL condition over `rows r` (same semantics as core.scope.admits)."""
    clauses, args = ["r.tenant = ?"], [scope.tenant]
    tokens = scope.reader_tokens()
    if tokens is not None:
        marks = ",".join("?" for _ in tokens)
        clauses.append(f"EXISTS (SELECT 1 FROM row_acl a WHERE a.row_id = r.row_id AND a.token IN ({marks}))")
        args.extend(tokens)
    if scope.as_of is not None:
        clauses.append("r.event_time IS NOT NULL AND r.event_time <= ?")
        args.append(encode_time(scope.as_of))
    if scope.since is not None:
        clauses.append("r.event_time IS NOT NULL AND r.event_time >= ?")
        args.append(encode_time(scope.since))
    if scope.known_at is not None:
        clauses.append("r.ingested_at <= ?")
        args.append(encode_time(scope.known_at))
        if scope.inactive_at_known:
            ids = sorted(scope.inactive_at_known)
            clauses.append(f"r.row_id NOT IN ({','.join('?' for _ in ids)})")
            args.extend(ids)
    else:
        clauses.append("r.state = 'active'")
    for column, values in (("kind", scope.kinds), ("author", scope.authors), ("thread", scope.threads)):
        if values is not None:
            values = sorted(values)
            clauses.append(f"r.{column} IN ({','.join('?' for _ in values)})" if values else "0")
            args.extend(values)
    return " AND ".join(clauses), args
