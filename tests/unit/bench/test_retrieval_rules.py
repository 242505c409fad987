"""`bench.retrieval --rules`: a question's scope and people leg are the query route's own (the
window of its time phrase, the leg of the persons it names), on a real store."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

from bench.retrieval.rules import question_scope
from bench.retrieval.store import rules_tag
from schemas.documents import DocumentIn
from services.core.caller import Caller


def test_the_rules_give_the_routes_window_and_people_leg_and_nothing_without_them(tmp_path):
    from services.bootstrap import build_memory
    from services.settings import Settings

    memory, lock = build_memory(Settings(data_dir=tmp_path / "data", embedder={"encoder_processes": 1}))
    try:
        memory.ingest([DocumentIn(text="Pricing decided", author="Dana Lee <dana@acme.example>",
                                  date=datetime(2025, 3, 4, tzinfo=UTC))], Caller(tenant="t1"))
        memory.catch_up()
        question = SimpleNamespace(group="t1", text="What did Dana Lee decide in March 2025?", as_of=None, known_at=None)
        plain, none = question_scope(memory, question, rules="")
        assert (plain.tenant, plain.since, plain.as_of, none) == ("t1", None, None, None)
        ruled, people = question_scope(memory, question, rules="both")
        assert ruled.tenant == "t1"
        assert ruled.since == datetime(2025, 3, 1, tzinfo=UTC)
        assert ruled.as_of is not None and ruled.as_of < datetime(2025, 4, 1, tzinfo=UTC)
        assert people is not None and people.aliases == {"Dana Lee <dana@acme.example>"}
        assert "Dana" not in people.query  # the name is taken out of what the leg matches
        # Another tenant's person is no one to this question's group.
        other = SimpleNamespace(group="t2", text=question.text, as_of=None, known_at=None)
        assert question_scope(memory, other, rules="people")[1] is None
    finally:
        memory.close()
        lock.release()
    assert len({rules_tag(r) for r in ("", "people", "time", "both")}) == 4  # their caches are kept apart
