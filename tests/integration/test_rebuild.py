"""`rebuild` drops every projection and replays the log: the same top-k ids afterwards."""

from datetime import UTC, datetime, timedelta

import pytest

from schemas.documents import DocumentIn
from schemas.events import RowArchived, RowSuperseded
from services.core.caller import Caller
from services.core.term_match import ALL_TERMS

pytestmark = pytest.mark.slow

TOPICS = ["remote work", "expense limit", "on-call rotation", "data retention", "laptop refresh", "travel class"]
QUERIES = ["remote work days", "how much can I expense", "who is on call", "retention of tickets",
           "laptop refresh cycle", "business class travel", "policy changes in spring"]


def corpus():
    base = datetime(2025, 1, 1, tzinfo=UTC)
    docs = []
    for i in range(120):
        topic = TOPICS[i % len(TOPICS)]
        docs.append(DocumentIn(
            text=f"Decision {i} on {topic}: the value is now {i * 3 % 17} after review by team {i % 5}.",
            author=f"person{i % 7}@corp.example", date=base + timedelta(days=3 * i), kind="email",
            thread=topic, source="email", source_id=f"m{i}",
        ))
    return docs


def top_ids(memory, **bounds):
    out = []
    for q in QUERIES:
        scope = memory.scope_for(Caller(), **bounds)
        result = memory.query(q, scope, memory.config_for(k=20))
        out.append([s.row.row_id for s in result.selected])
    return out


def test_rebuild_gives_identical_answers(memory):
    result = memory.ingest(corpus())
    memory.catch_up()
    ids = result.row_ids
    memory.append([RowArchived(row_id=ids[3], reason="test"), RowSuperseded(row_id=ids[0], superseded_by=ids[6])])
    memory.catch_up()
    as_of = datetime(2025, 6, 1, tzinfo=UTC)
    before = (top_ids(memory), top_ids(memory, as_of=as_of), memory.counts())
    assert ids[3] not in sum(before[0], [])
    stats = memory.rebuild()
    assert stats.events == memory.head()
    after = (top_ids(memory), top_ids(memory, as_of=as_of), memory.counts())
    assert after == before
    assert memory.stored_row(ids[0]).superseded_by == ids[6]


def test_projector_resumes_and_replay_changes_nothing(memory):
    docs = corpus()[:40]
    memory.ingest(docs[:20])
    memory.catch_up()
    applied = memory.applied
    memory.ingest(docs[20:] + docs[:5])  # 5 repeats of sources already stored
    memory.catch_up()
    counts = memory.counts()
    assert counts["active"] == 40 and counts["skipped"] == 5
    # Re-applying events that the checkpoint already covers (as after a crash between the index
    # writes and the row-store commit) leaves every projection as it was.
    memory.projection.apply(memory.read_log(applied - 5, 10))
    assert memory.counts() == counts
    hits = memory._lexical.search_text(["decision"], memory.scope_for(Caller()), 1000, ALL_TERMS)
    assert len(hits) == 40
