"""What the Elasticsearch row store writes and asks, as plain bodies without a client: the
companion indices' mappings and settings, the lanes' checkpoint documents, a batch's bulk
operations and its redo record, the queries of `versions_of`, and the documents read back as
rows' heads, versions and steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from schemas.rows import Row, RowChange
from services.adapters import elasticsearch_common as es
from services.core.positions import MAX_LANES
from services.core.versions import VersionFields
from services.ports import RowHead, RowMutation, SkippedDocument

HEAD_FIELDS = ["row_id", "thread", "ingest_position", "event_time", "ingested_at"]  # a RowHead
VERSION_FIELDS = [*HEAD_FIELDS, "tenant", "acl", "state", "superseded_by"]  # a VersionFields

_K = {"type": "keyword"}
HISTORY_MAPPINGS = {"dynamic": "strict", "properties": {
    "row_id": _K, "tenant": _K, "position": {"type": "long"}, "at": {"type": "date"}, "at_us": {"type": "long"},
    "change": _K, "state": _K, "superseded_by": _K, "run_id": _K, "reason": {"type": "text", "index": False},
}}
SKIPPED_MAPPINGS = {"dynamic": "strict", "properties": {
    "row_id": _K, "position": {"type": "long"}, "reason": _K, "duplicate_of": _K, "tenant": _K,
}}
META_MAPPINGS = {"dynamic": "strict", "properties": {
    "applied_position": {"type": "long"},
    # The redo record of the batch being applied: kept whole in _source, never indexed.
    "pending": {"type": "object", "enabled": False},
}}
# The companion indices `<index>-<suffix>` beside the rows index.
COMPANIONS = (("history", HISTORY_MAPPINGS), ("skipped", SKIPPED_MAPPINGS), ("meta", META_MAPPINGS))


def checkpoint_id(lane: int) -> str:
    """The id of a lane's checkpoint document in `<index>-meta`. Lane 0's keeps the name it had
    before lanes, so an existing cluster reads on from where it was."""
    return "checkpoint" if lane == 0 else f"checkpoint-{lane}"


CHECKPOINT_LANES = {checkpoint_id(lane): lane for lane in range(MAX_LANES)}  # document id -> lane


class SeenCheckpoint(NamedTuple):
    """A lane's checkpoint document as this process last read or wrote it: the sequence number
    and primary term its next write is conditional on, the concrete index it lives in (written
    back there, not through the alias, so a rebuild's switch cannot redirect it), and the
    position it holds."""

    seq_no: int
    primary_term: int
    index: str
    applied: int


def companion_settings(suffix: str, shards: int, replicas: int) -> dict:
    """The checkpoints are a document per lane: their index gets one shard whatever the rows index has."""
    return {"number_of_shards": 1 if suffix == "meta" else shards, "number_of_replicas": replicas}


def history_document(mutation: RowMutation) -> dict:
    change = mutation.change
    doc = {"row_id": mutation.row.row_id, "tenant": mutation.row.tenant, "position": change.position,
           "at": es.iso(change.at), "at_us": es.micros(change.at), "change": change.change, "state": change.state,
           "reason": change.reason}
    if change.superseded_by is not None:
        doc["superseded_by"] = change.superseded_by
    if change.run_id is not None:
        doc["run_id"] = change.run_id
    return doc


def batch_operations(index: str, mutations: Sequence[RowMutation], skipped: Sequence[SkippedDocument]) -> list[dict]:
    """The bulk body of one batch. History and skips are `create` (a replay finds them there:
    409, tolerated = INSERT OR IGNORE); rows are `index` with the position of their state as an
    external version (a replay, or a stale writer, gets a 409 and the stored state stays)."""
    ops: list[dict] = []
    for mutation in mutations:
        row_id = mutation.row.row_id
        ops += [{"index": {"_index": index, "_id": row_id, "version": mutation.change.position,
                           "version_type": "external"}}, es.row_document(mutation.row)]
        ops += [{"create": {"_index": f"{index}-history", "_id": f"{row_id}:{mutation.change.position}"}},
                history_document(mutation)]
    for skip in skipped:
        doc = {"row_id": skip.row_id, "position": skip.position, "reason": skip.reason}
        if skip.duplicate_of is not None:
            doc["duplicate_of"] = skip.duplicate_of
        if skip.tenant is not None:
            doc["tenant"] = skip.tenant
        ops += [{"create": {"_index": f"{index}-skipped", "_id": f"{skip.row_id}:{skip.position}"}}, doc]
    return ops


def encode_batch(mutations: Sequence[RowMutation], skipped: Sequence[SkippedDocument], position: int) -> dict:
    return {
        "position": position,
        "mutations": [{"row": m.row.model_dump(mode="json"), "change": m.change.model_dump(mode="json")}
                      for m in mutations],
        "skipped": [[s.row_id, s.position, s.reason, s.duplicate_of, s.tenant] for s in skipped],
    }


def decode_batch(pending: dict) -> tuple[list[RowMutation], list[SkippedDocument], int]:
    mutations = [RowMutation(row=Row.model_validate(m["row"]), change=RowChange.model_validate(m["change"]))
                 for m in pending["mutations"]]
    return mutations, [SkippedDocument(*s) for s in pending["skipped"]], int(pending["position"])


def versions_query(tenant: str, threads: Sequence[str], row_ids: Sequence[str]) -> dict:
    """The rows of a tenant in `threads` or among `row_ids` (what `versions_of` reads)."""
    either = [{"terms": {"thread": sorted(threads)}}] if threads else []
    either += [{"terms": {"row_id": sorted(row_ids)}}] if row_ids else []
    return {"bool": {"filter": [{"term": {"tenant": tenant}},
                                {"bool": {"should": either, "minimum_should_match": 1}}]}}


def steps_by_query(tenant: str, row_ids: Sequence[str], known_at: datetime) -> dict:
    """The maintenance steps of these rows up to known_at (a row without one was active then,
    superseded by nothing: its first step, 'observed', says so)."""
    return {"bool": {"filter": [{"term": {"tenant": tenant}}, {"terms": {"row_id": sorted(row_ids)}},
                                {"range": {"at_us": {"lte": es.micros(known_at)}}}],
                     "must_not": [{"term": {"change": "observed"}}]}}


def version_fields(source: dict, step: dict | None) -> VersionFields:
    """A row's version fields; with `step` (its last step by known_at), its state then."""
    state, pointer = (source.get("state", "active"), source.get("superseded_by")) if step is None \
        else (step["state"], step.get("superseded_by"))
    return VersionFields(source["row_id"], source["tenant"], source.get("thread"), es.parse_iso(source.get("event_time")),
                         es.parse_iso(source["ingested_at"]), source["ingest_position"], tuple(source.get("acl", [])),
                         state, pointer)


def head_from(source: dict) -> RowHead:
    return RowHead(source["row_id"], source.get("thread"), source["ingest_position"],
                   es.parse_iso(source.get("event_time")), es.parse_iso(source["ingested_at"]))


def change_from(source: dict) -> RowChange:
    """A step of a row's history, from its document in `<index>-history`."""
    return RowChange(position=source["position"], at=source["at"], change=source["change"], state=source["state"],
                     superseded_by=source.get("superseded_by"), run_id=source.get("run_id"),
                     reason=source.get("reason", ""))
