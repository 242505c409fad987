"""The committed JSON Schema files are the current contracts (run `python -m schemas.export`)."""

import json

from schemas import SCHEMA_VERSION, admin
from schemas.documents import DocumentIn
from schemas.events import (
    EVENT_ADAPTER,
    DocumentObserved,
    RowArchived,
    event_from_json,
    event_to_json,
)
from schemas.export import OUT, all_schemas
from services.core.maintenance.consolidation import DEFAULT_TAU


def test_committed_schemas_are_current():
    for name, schema in all_schemas().items():
        path = OUT / f"{name}.v{SCHEMA_VERSION}.json"
        assert path.exists(), f"{path.name} missing: run python -m schemas.export"
        assert json.loads(path.read_text()) == json.loads(json.dumps(schema)), f"{path.name} is stale"


def test_events_round_trip_with_their_type_and_version():
    event = DocumentObserved(tenant="t", row_id="r1", document=DocumentIn(text="x", date="2025-03-04"))
    again = event_from_json(event_to_json(event))
    assert again == event and again.version == 1
    assert event_from_json(RowArchived(row_id="r1", reason="why").model_dump_json()).type == "row_archived"
    names = {s["properties"]["type"]["const"] for s in EVENT_ADAPTER.json_schema()["$defs"].values() if "type" in s.get("properties", {})}
    assert {"document_observed", "row_superseded", "row_archived", "row_derived", "row_restored"} <= names


def test_naive_dates_are_utc_and_lists_are_cleaned():
    doc = DocumentIn(text="x", date="2025-03-04T10:00:00", tags=[" a ", "a", "", "b"])
    assert doc.date.utcoffset().total_seconds() == 0 and doc.tags == ["a", "b"]


def test_admin_schema_defaults_match_the_core():
    # schemas/ may not import services/, so the default is a copy; this keeps the copy honest.
    assert admin.DEFAULT_TAU == DEFAULT_TAU and admin.ConsolidateRequest().tau == DEFAULT_TAU
