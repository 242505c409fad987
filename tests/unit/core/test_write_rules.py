from schemas.documents import DocumentIn
from services.core.text import content_terms, tag_candidates
from services.core.write_rules import is_empty, row_id_for


def test_same_source_item_same_row_id_across_texts_and_tenants_differ():
    a = DocumentIn(text="v1", source="email", source_id="m1@x")
    b = DocumentIn(text="v2 edited", source="email", source_id="m1@x")
    assert row_id_for("t", a) == row_id_for("t", b)
    assert row_id_for("t", a) != row_id_for("u", a)


def test_exact_repeat_in_author_scope_same_id_other_author_differs():
    a = DocumentIn(text="Remote days: 3", author="Alice")
    assert row_id_for("t", a) == row_id_for("t", DocumentIn(text="  Remote days: 3\n", author="alice"))
    assert row_id_for("t", a) != row_id_for("t", DocumentIn(text="Remote days: 3", author="Bob"))


def test_empty_text():
    assert is_empty(DocumentIn(text=" \n\t"))
    assert not is_empty(DocumentIn(text="x"))


def test_query_analysis():
    assert content_terms("What is the remote-work policy, now?") == ["remote", "work", "policy"]
    cands = tag_candidates("Who changed KAFKA-1234 with alice@x.com?")
    assert "kafka-1234" in cands and "alice@x.com" in cands
