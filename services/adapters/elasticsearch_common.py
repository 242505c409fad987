"""What the Elasticsearch row store and lexical index share: the client, the one place where
driver errors become ours, the index template (explicit mappings), the document of a row and
the Scope as a `bool.filter`.

Times are indexed twice: as `date` fields (for people and dashboards) and as integer
microseconds since the epoch (`*_us`, for the scope). ES `date` keeps milliseconds only, which
would make `event_time <= as_of` disagree with `services.core.scope.admits` inside a
millisecond; `date_nanos` would refuse dates before 1970.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from schemas.rows import Row
from services.core.scope import Scope, acl_tokens
from services.core.text import normalise_tag
from services.core.write_rules import author_scope, content_hash
from services.errors import BackendUnavailable, OrgmemError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Query terms are analysed like the text (see `ANALYSIS`): words are runs of letters, digits and
# combining marks, as in `services.core.text.content_terms`, so "don't" gives "don" and "t",
# and "v2.3.1" gives "v2", "3", "1" (the standard tokenizer would keep both whole).
ANALYZER = "orgmem_english"
ANALYSIS = {
    "tokenizer": {"orgmem_words": {"type": "pattern", "pattern": "[^\\p{L}\\p{N}\\p{M}]+"}},
    "filter": {
        # Porter2 (Snowball English), the stemmer the embedded profile's tantivy index uses.
        "orgmem_stem": {"type": "stemmer", "language": "porter2"},
        "orgmem_long": {"type": "length", "max": 39},
    },
    "analyzer": {
        ANALYZER: {"type": "custom", "tokenizer": "orgmem_words", "filter": ["lowercase", "orgmem_long", "orgmem_stem"]}
    },
}

_KEYWORD = {"type": "keyword"}
_STORED_ONLY = {"type": "keyword", "index": False, "doc_values": False}

ROW_MAPPINGS = {
    # strict: a field the code does not know is a bug, not something to guess a mapping for.
    "dynamic": "strict",
    "properties": {
        "row_id": _KEYWORD,
        "tenant": _KEYWORD,
        # Text and title are analysed once more together in `body`, the field the lexical leg
        # matches, so that "every term" can be met across title and text.
        "text": {"type": "text", "analyzer": ANALYZER, "copy_to": "body", "norms": True},
        "title": {"type": "text", "analyzer": ANALYZER, "copy_to": "body"},
        "body": {"type": "text", "analyzer": ANALYZER},
        "author": _KEYWORD,
        "author_scope": _KEYWORD,
        "content_hash": _KEYWORD,
        "kind": _KEYWORD,
        "thread": _KEYWORD,
        "tags": _STORED_ONLY,
        "participants": _STORED_ONLY,
        "acl": _STORED_ONLY,  # as written; `acl_tokens` is what the scope matches
        "acl_tokens": _KEYWORD,
        # Normalised author, thread, participants and tags: the tag leg's terms. A keyword field
        # has no norms and no term frequencies, so a matched tag scores its idf times a constant.
        "tag": _KEYWORD,
        "state": _KEYWORD,
        "superseded_by": _KEYWORD,
        "derived_from": _KEYWORD,
        "source": _KEYWORD,
        "source_id": _KEYWORD,
        "parent": _KEYWORD,
        "event_time": {"type": "date"},
        "event_us": {"type": "long"},
        "ingested_at": {"type": "date"},
        "ingested_us": {"type": "long"},
        "ingest_position": {"type": "long"},
    },
}

ADDED_FIELDS = ("parent",)


def index_settings(shards: int = 1, replicas: int = 0) -> dict:
    """One shard by default: BM25 statistics are then exact, so ranks agree with the embedded
    profile; with more shards the searches use dfs_query_then_fetch for global statistics."""
    return {"number_of_shards": shards, "number_of_replicas": replicas, "analysis": ANALYSIS}


def template_body(index: str, shards: int = 1, replicas: int = 0) -> dict:
    """The composable index template for the rows index (and any index named like it)."""
    return {
        "index_patterns": [index],
        "priority": 200,
        "template": {"settings": index_settings(shards, replicas), "mappings": ROW_MAPPINGS},
        "_meta": {"managed_by": "orgmem", "description": "orgmem rows: row store and lexical index"},
    }


def micros(value: datetime) -> int:
    if not isinstance(value, datetime):
        raise TypeError(f"expected a datetime, got {type(value).__name__}")
    if value.tzinfo is None:  # naive datetimes are UTC, as in schemas.documents
        value = value.replace(tzinfo=UTC)
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def iso(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_iso(value: str | None) -> datetime | None:
    """The inverse of `iso` (Python 3.11 reads the trailing Z)."""
    return None if value is None else datetime.fromisoformat(value)


def row_tags(row: Row) -> list[str]:
    values = [row.author, row.thread or "", *row.participants, *row.tags]
    return sorted({tag for tag in (normalise_tag(v) for v in values) if tag})


def row_document(row: Row) -> dict:
    """The ES document of a row: everything the Row holds, plus the derived fields that filters,
    the tag leg and the write-path rules look up."""
    doc: dict = {
        "row_id": row.row_id,
        "tenant": row.tenant,
        "text": row.text,
        "author": row.author,
        "author_scope": author_scope(row.author),
        "content_hash": content_hash(row.text),
        "kind": row.kind,
        "tags": list(row.tags),
        "participants": list(row.participants),
        "acl": list(row.acl),
        "acl_tokens": acl_tokens(row.acl),
        "tag": row_tags(row),
        "state": row.state,
        "derived_from": list(row.derived_from),
        "ingested_at": iso(row.ingested_at),
        "ingested_us": micros(row.ingested_at),
        "ingest_position": row.ingest_position,
    }
    # Absent rather than null where the Row has None: a missing field never matches a term or
    # range, which is the scope's rule for undated rows and rows without a thread.
    for name in ("thread", "title", "source", "source_id", "superseded_by", "parent"):
        value = getattr(row, name)
        if value is not None:
            doc[name] = value
    if row.event_time is not None:
        doc["event_time"] = iso(row.event_time)
        doc["event_us"] = micros(row.event_time)
    return doc


def row_from_document(source: dict) -> Row:
    return Row(
        row_id=source["row_id"], tenant=source["tenant"], text=source["text"], author=source.get("author", ""),
        event_time=source.get("event_time"), kind=source.get("kind", "doc"), thread=source.get("thread"),
        title=source.get("title"), tags=source.get("tags", []), participants=source.get("participants", []),
        acl=source.get("acl", []), source=source.get("source"), source_id=source.get("source_id"),
        ingest_position=source["ingest_position"], ingested_at=source["ingested_at"],
        state=source.get("state", "active"), superseded_by=source.get("superseded_by"),
        derived_from=source.get("derived_from", []), parent=source.get("parent"),
    )


MATCH_NONE = {"match_none": {}}


def scope_clauses(scope: Scope) -> tuple[list[dict], list[dict]] | None:
    """(filter, must_not) clauses equal to `services.core.scope.admits`; None when the scope
    admits nothing at all (an empty set of kinds, authors or threads)."""
    filters: list[dict] = [{"term": {"tenant": scope.tenant}}]
    must_not: list[dict] = []
    readers = scope.reader_tokens()
    if readers is not None:
        filters.append({"terms": {"acl_tokens": readers}})
    if scope.as_of is not None:
        filters.append({"range": {"event_us": {"lte": micros(scope.as_of)}}})  # undated rows fail
    if scope.since is not None:
        filters.append({"range": {"event_us": {"gte": micros(scope.since)}}})
    if scope.known_at is not None:
        # The state as it was at known_at comes from the row store (inactive_at_known); the
        # current state is deliberately not consulted.
        filters.append({"range": {"ingested_us": {"lte": micros(scope.known_at)}}})
        if scope.inactive_at_known:
            must_not.append({"terms": {"row_id": sorted(scope.inactive_at_known)}})
    else:
        filters.append({"term": {"state": "active"}})
    for field, allowed in (("kind", scope.kinds), ("author", scope.authors), ("thread", scope.threads)):
        if allowed is None:
            continue
        values = sorted(v for v in allowed if v is not None)
        if not values:
            return None
        filters.append({"terms": {field: values}})
    return filters, must_not


def scoped(query: dict | None, scope: Scope) -> dict | None:
    """`query` ranked inside the scope: the scope sits in `filter`, so it limits before ranking
    and adds nothing to the score. None when the scope admits nothing."""
    clauses = scope_clauses(scope)
    if clauses is None:
        return None
    filters, must_not = clauses
    body: dict = {"filter": filters}
    if query is not None:
        body["must"] = [query]
    if must_not:
        body["must_not"] = must_not
    return {"bool": body}


def connect(url: str, request_timeout: float = 30.0):
    """A client for one cluster URL (several may be given comma-separated)."""
    from elasticsearch import Elasticsearch

    hosts = [u.strip() for u in url.split(",") if u.strip()]
    if not hosts:
        raise OrgmemError("cluster.es_url: empty")
    return Elasticsearch(hosts, request_timeout=request_timeout, max_retries=3, retry_on_timeout=True)


@contextmanager
def driver_errors(component: str, action: str) -> Iterator[None]:
    """The one place where elasticsearch-py's errors become ours: the cluster out of reach (or
    failing, 5xx) is BackendUnavailable; a request it refused (4xx) is an OrgmemError."""
    from elasticsearch import ApiError, TransportError

    try:
        yield
    except OrgmemError:
        raise
    except ApiError as exc:
        status = getattr(exc, "status_code", None)
        detail = f"{action}: HTTP {status}: {getattr(exc, 'error', None) or exc}"
        if status is not None and 400 <= int(status) < 500 and int(status) != 429:
            raise OrgmemError(f"{component}: {detail}") from exc
        raise BackendUnavailable(component, detail) from exc
    except TransportError as exc:  # connection refused, timeouts, TLS
        raise BackendUnavailable(component, f"{action}: {exc}") from exc


def ensure_template_and_index(client, component: str, index: str, shards: int = 1, replicas: int = 0) -> None:
    """Install the template and create the index if it is missing (both idempotent)."""
    from elasticsearch import BadRequestError

    body = template_body(index, shards, replicas)
    with driver_errors(component, f"install template for {index}"):
        client.indices.put_index_template(
            name=f"{index}-template", index_patterns=body["index_patterns"], priority=body["priority"],
            template=body["template"], meta=body["_meta"],
        )
        if client.indices.exists(index=index):
            # The mapping is strict: an index made before a field existed gains it (adding a field
            # is allowed on a live index; these are the fields added since the first release).
            client.indices.put_mapping(index=index, properties={k: ROW_MAPPINGS["properties"][k] for k in ADDED_FIELDS})
        else:
            try:
                client.indices.create(index=index)
            except BadRequestError as exc:  # created meanwhile by another process
                if "resource_already_exists" not in str(exc):
                    raise


VERSION_CONFLICT = "version_conflict_engine_exception"


def bulk_failures(response: dict, conflicts_ok: bool = False) -> list[str]:
    """Items of a bulk response that failed, as 'op id: HTTP status: reason'. With `conflicts_ok`,
    a version conflict is not a failure: the document already holds this write or a later one
    (a `create` found it, an externally versioned `index` found an equal or higher version)."""
    failures = []
    if not response.get("errors"):
        return failures
    for item in response.get("items", []):
        (op, result), = item.items()
        status = result.get("status", 0)
        error = result.get("error", {})
        if status < 300 or (conflicts_ok and status == 409 and isinstance(error, dict)
                            and error.get("type") == VERSION_CONFLICT):
            continue
        reason = error.get("reason", error) if isinstance(error, dict) else error
        failures.append(f"{op} {result.get('_id')}: HTTP {status}: {reason}")
    return failures


def search_type_for(shards: int) -> str | None:
    return "dfs_query_then_fetch" if shards > 1 else None
