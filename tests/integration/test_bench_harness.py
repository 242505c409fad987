"""The retrieval harness on a slice of LoCoMo: ingest through the write path, cache, replay, report.

The slice is the first sessions of one conversation, so the test encodes about sixty turns.
"""

from __future__ import annotations

import pytest

from bench.retrieval.datasets import SHARED_DATA, Dataset, Group, load
from bench.retrieval.harness import REFERENCE, GroupIndex, evaluate, replay_question
from bench.retrieval.lexical_legs import attach_lexical_legs
from bench.retrieval.metrics import ALL
from bench.retrieval.report import write_markdown, write_plot
from bench.retrieval.store import cached_candidates, open_store
from bench.retrieval.variants import VARIANTS
from services.core.scope import Scope

LOCOMO = SHARED_DATA / "locomo" / "locomo10.json"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not LOCOMO.exists(), reason=f"LoCoMo not found at {LOCOMO} (shared data is absent)"),
]
TURNS = 60


def _slice() -> Dataset:
    full = load("locomo")
    group = full.groups[0]
    docs = group.documents[:TURNS]
    kept = {d.source_id for d in docs}
    questions = [q for q in full.questions if q.group == group.key and set(q.gold) <= kept]
    return Dataset("locomo", full.source, [Group(group.key, docs)], questions)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    data = _slice()
    folder = tmp_path_factory.mktemp("bench") / "locomo"
    return data, folder, cached_candidates(data, folder)


def test_candidates_cover_the_slice_and_are_cached(built):
    data, folder, cands = built
    assert len(cands.questions) == len(data.questions) > 3
    assert len(cands.groups[data.groups[0].key].ids) == TURNS
    assert all(set(q.gold) <= set(cands.groups[q.group].ids) for q in cands.questions)
    again = cached_candidates(data, folder)  # from the pickle: no store is opened
    assert [q.qid for q in again.questions] == [q.qid for q in cands.questions]


def test_metrics_are_sane_and_grow_with_k(built):
    _, _, cands = built
    for name in ("rrf-2-1", "pursuit-30", "coverage"):
        s = evaluate(cands, VARIANTS[name].config, (5, 20))
        assert 0.0 <= s.mean(ALL, "recall@5") <= s.mean(ALL, "recall@20") <= 1.0
        assert s.mean(ALL, "coverage@5") <= s.mean(ALL, "coverage@20")
    # On a 60-turn slice, 20 rows of the plain fusion must find most of the gold turns.
    assert evaluate(cands, VARIANTS["rrf-2-1"].config, (20,)).mean(ALL, "recall@20") > 0.5


def test_offline_replay_equals_the_online_read_path(built):
    data, folder, cands = built
    # Term-match rules other than the cached leg's "any" replay from legs fetched per rule.
    rules = [VARIANTS[name].config for name in ("bm25-adaptive", "preset-default", "preset-paper-orgmembench")]
    attach_lexical_legs(cands, data, folder, rules)
    memory, lock = open_store(data, folder)  # already built: nothing is ingested again
    try:
        head = memory.head()
        index = GroupIndex(cands.groups[data.groups[0].key])
        configs = [REFERENCE, VARIANTS["coverage"].config, VARIANTS["coverage"].config.with_overrides(reserve=3),
                   VARIANTS["coverage-sessions"].config]
        configs += rules
        for config in configs:
            for q in cands.questions[:5]:
                online = memory.query(next(d.text for d in data.questions if d.qid == q.qid),
                                      Scope(tenant=q.group), config.with_overrides(k=10))
                assert [s.row.row_id for s in online.selected] == replay_question(q, index, config, 10)
        assert memory.head() == head
    finally:
        memory.close()
        lock.release()


def test_report_writes_a_table_and_a_plot(built, tmp_path):
    _, _, cands = built
    results = {n: evaluate(cands, VARIANTS[n].config, (10,)) for n in ("rrf-2-1", "coverage")}
    text = write_markdown(tmp_path / "t.md", "slice", results, (10,), True)
    write_plot(tmp_path / "img" / "t.png", "slice", results, (10,), True)
    assert "| coverage |" in text and "coverage@10" in text
    assert (tmp_path / "img" / "t.png").read_bytes()[:4] == b"\x89PNG"
