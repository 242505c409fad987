"""Write the JSON Schema of every contract to schemas/json/ (for clients in other languages).

Run `python -m schemas.export`; a test checks that the committed files are current.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel

from schemas import SCHEMA_VERSION, admin, answer, api, backup, connectors, documents, erasure, people, rows
from schemas.events import EVENT_ADAPTER, LoggedEvent

OUT = Path(__file__).parent / "json"


def all_schemas() -> dict[str, dict]:
    models: list[type[BaseModel]] = [
        documents.DocumentIn, rows.Row, rows.RowChange, LoggedEvent,
        api.IngestRequest, api.IngestResponse, api.QueryRequest, api.QueryResponse,
        api.RowResponse, api.ThreadResponse, api.StatsResponse, answer.AnswerRequest, answer.AnswerResponse,
        admin.KeyCreateRequest, admin.KeyCreateResponse, admin.KeyListResponse, admin.KeyInfo,
        admin.ConsolidateRequest, admin.RefineRequest, admin.RunAccepted, admin.RunView, admin.RunsResponse,
        admin.RunDecisionsResponse, admin.AuditEntry, admin.AuditResponse,
        backup.HoldRequest, backup.HoldResponse, backup.HoldReleased,
        connectors.ConnectorRunRequest, connectors.ConnectorRunResponse, connectors.DeadLettersResponse,
        erasure.ErasureRequest, erasure.ErasureResponse,
        people.PeopleResponse, people.PersonResponse,
    ]
    out = {m.__name__: m.model_json_schema() for m in models}
    out["Event"] = EVENT_ADAPTER.json_schema()
    for schema in out.values():
        schema["$comment"] = f"orgmem schema version {SCHEMA_VERSION}"
    return out


def main() -> int:
    OUT.mkdir(exist_ok=True)
    for name, schema in all_schemas().items():
        (OUT / f"{name}.v{SCHEMA_VERSION}.json").write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
    print(f"wrote {len(all_schemas())} schemas to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
