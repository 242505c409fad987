"""Erasing rows from the embedded indexes leaves nothing of them in their files: tantivy's term
dictionary no longer holds an erased row's words (a plain delete would keep them until a merge),
and no file of the Qdrant Edge shard holds its payload (a plain delete only marks the point)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import numpy as np
import tantivy

from schemas.rows import Row
from services.adapters.lexical.tantivy import TantivyLexicalIndex
from services.adapters.vector.qdrant_edge import QdrantEdgeVectorIndex
from services.core.scope import Scope
from services.core.term_match import ALL_TERMS

# Ends in a digit: the analyzer stems words, and a marker ending in "e" or "ed" would be indexed cut.
MARKER = "zqx" + uuid.uuid4().hex[:10] + "7"
NOW = datetime(2025, 1, 1, tzinfo=UTC)


def _rows(n: int) -> list[Row]:
    return [Row(row_id=f"r{i:023x}", tenant="t", text=f"note {i} {MARKER if i == 3 else 'plain'}",
                author=f"{MARKER}author" if i == 3 else "bob", thread="t1", ingest_position=i + 1, ingested_at=NOW)
            for i in range(n)]


def _terms(path, field: str) -> set[str]:
    index = tantivy.Index.open(str(path))
    index.reload()
    return {term for term, _ in index.searcher().terms_with_prefix(field, "")}


def test_tantivy_delete_drops_the_terms_of_erased_rows(tmp_path):
    index = TantivyLexicalIndex(tmp_path / "lexical")
    rows = _rows(30)
    index.upsert(rows[:10])
    index.upsert(rows[10:])  # two segments, the erased row in the first
    assert MARKER in _terms(tmp_path / "lexical", "text")  # the check can fail
    index.delete([rows[3].row_id], survivors=lambda: iter(rows))
    assert MARKER not in _terms(tmp_path / "lexical", "text")
    assert not any(MARKER in t for t in _terms(tmp_path / "lexical", "author"))
    assert index.count() == 29
    hits = index.search_text(["plain"], Scope(tenant="t"), 50, ALL_TERMS)
    assert len(hits) == 29 and rows[3].row_id not in {h.row_id for h in hits}


def _grep(folder, needle: bytes) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_qdrant_edge_delete_leaves_no_payload_in_the_shard_files(tmp_path):
    vectors = QdrantEdgeVectorIndex(tmp_path / "vectors", 8)
    rows = _rows(20)
    matrix = np.random.default_rng(1).random((20, 8)).astype("float32")
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    vectors.upsert(rows, matrix)
    assert _grep(tmp_path / "vectors", MARKER.encode())  # the check can fail
    vectors.delete([rows[3].row_id, "r" + "f" * 23])  # an unknown id is ignored
    assert _grep(tmp_path, MARKER.encode()) == []
    assert vectors.count() == 19
    kept = vectors.vectors([rows[4].row_id])[rows[4].row_id]
    assert np.allclose(kept, matrix[4], atol=1e-6)
    hits = vectors.search(matrix[3], Scope(tenant="t"), 50)
    assert rows[3].row_id not in {h.row_id for h in hits} and len(hits) == 19
    vectors.close()
    reopened = QdrantEdgeVectorIndex(tmp_path / "vectors", 8)
    assert reopened.count() == 19
    reopened.close()
