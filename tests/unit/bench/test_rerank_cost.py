"""bench.rerank_cost pairs each question with rows of its own conversation only, and refuses
counts under one before it loads a model."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bench import rerank_cost
from bench.retrieval.datasets import Dataset, Group, Question
from schemas.documents import DocumentIn


def _dataset() -> Dataset:
    def doc(group: str, i: int) -> DocumentIn:
        return DocumentIn(text=f"{group} turn {i}", author="a", date=datetime(2024, 1, 1, tzinfo=UTC), kind="chat",
                          source="bench", source_id=f"{group}-{i}")

    groups = [Group("small", [doc("small", i) for i in range(3)]), Group("large", [doc("large", i) for i in range(40)])]
    questions = [Question(f"q{i}", f"question {i}", "c", group, ()) for i, group in enumerate(["small", "large"] * 3)]
    return Dataset("fake", "bench", groups, questions)


def test_pairs_come_from_the_questions_own_conversation():
    work = rerank_cost.pairs_per_question(_dataset(), questions=6, rows=20, seed=1)
    assert len(work) == 6
    owners = {q.text: q.group for q in _dataset().questions}
    for question, rows in work:
        group = owners[question]
        assert all(row.startswith(f"{group} turn") for row in rows)
        assert len(rows) == len(set(rows)) == (3 if group == "small" else 20)  # a short conversation gives what it has


@pytest.mark.parametrize("argv", [["--questions", "0"], ["--rows", "10", "0"]])
def test_counts_under_one_are_refused_before_a_model_loads(argv, monkeypatch):
    monkeypatch.setattr(rerank_cost, "OnnxEmbedder", lambda *a, **k: pytest.fail("a model was loaded"))
    monkeypatch.setattr(rerank_cost, "load", lambda name: pytest.fail("the dataset was read"))
    with pytest.raises(SystemExit) as stop:
        rerank_cost.main(argv)
    assert stop.value.code == 2
