"""Write-path rules (Mem++ §3.2): one row per document, stored whole, no generative model.

Row ids are derived from content, so the API can name a row before the projection runs and a
replay of the log names the same rows.
"""

from __future__ import annotations

import hashlib

from schemas.documents import DocumentIn


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8"))
        h.update(b"\x1f")
    return h.hexdigest()


# The sources connectors write (email Message-IDs, meeting ids, Jira keys, GitHub issues, CSV rows,
# and the contract sources of services/connectors/sources: chat message ts, page ids).
# A document submitted through the API may not claim one: Message-IDs are visible to every
# recipient and Jira keys are sequential, so a writer could post a future item's source id first
# and the genuine item, when a connector imports it, would be skipped as already known.
CONNECTOR_SOURCES = frozenset({"email", "meeting", "jira", "github", "slack", "mattermost", "teams", "documents"})
CONNECTOR_SOURCE_PREFIXES = ("csv:",)


def is_connector_source(source: str | None) -> bool:
    name = (source or "").strip().lower()
    return name in CONNECTOR_SOURCES or name.startswith(CONNECTOR_SOURCE_PREFIXES)


def content_hash(text: str) -> str:
    """Identity of a text for the 'exact repeat' rule (surrounding whitespace ignored)."""
    return _digest(text.strip())


def _source_row_id(tenant: str, source: str | None, source_id: str) -> str:
    return "r" + _digest("src", tenant, source or "", source_id)[:23]


def row_id_for(tenant: str, doc: DocumentIn) -> str:
    """A source item always maps to the same row id; so does a repeated text in one author scope."""
    if doc.source_id:
        return _source_row_id(tenant, doc.source, doc.source_id)
    return "r" + _digest("txt", tenant, doc.author.strip().lower(), content_hash(doc.text))[:23]


def parent_row_id(tenant: str, doc: DocumentIn) -> str | None:
    """The row id of the document `doc` came inside (its `parent`, a source id of the same source),
    whether or not that row is stored yet: the id is the one `row_id_for` gives the parent."""
    return _source_row_id(tenant, doc.source, doc.parent) if doc.parent else None


def derived_row_id(run_id: str, sources: list[str]) -> str:
    return "d" + _digest("derived", run_id, *sorted(sources))[:23]


def is_empty(doc: DocumentIn) -> bool:
    return not doc.text.strip()


def author_scope(author: str) -> str:
    return author.strip().lower()
