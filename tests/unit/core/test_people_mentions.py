"""The people rule's reading of a question (services.core.people_mentions): exact and conservative."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas.rows import Row
from services.core.people import build
from services.core.people_mentions import named_in, without_names


def _rows(*authors: str) -> list[Row]:
    return [Row(row_id=f"r{i}", tenant="t", text="x", source="s", source_id=f"s{i}", author=a,
                ingest_position=i, ingested_at=datetime(2026, 1, 1, tzinfo=UTC))
            for i, a in enumerate(authors)]


PERSONS = build(_rows("Dana Lee <dana@acme.example>", "Dana Ortiz <dortiz@acme.example>", "Priya Raman",
                      "Mark Stone <mark@acme.example>", "support", "Zoë Ferreira"))


def ids(question: str) -> list[str]:
    return [PERSONS[n.person_id].display_name for n in named_in(question, PERSONS)]


def test_full_name_and_address_name_the_person_in_any_case():
    assert ids("What did Dana Lee decide?") == ["Dana Lee"]
    assert ids("what did dana lee decide?") == ["Dana Lee"]
    assert ids("Mail from DANA@ACME.EXAMPLE about pricing") == ["Dana Lee"]
    assert ids("What did Zoë Ferreira say?") == ["Zoë Ferreira"]


def test_a_shared_first_name_names_no_one_and_a_unique_one_names_its_owner():
    assert ids("What did Dana decide?") == []
    assert ids("What did Priya decide?") == ["Priya Raman"]
    assert ids("what did priya decide?") == []  # one word counts only capitalised


def test_look_alikes_and_words_are_not_names():
    assert ids("What did Dana Li decide?") == []  # Dana is shared, "Dana Li" is nobody known
    assert ids("Is there support for SSO?") == []  # the account "support", lower case, is a word
    assert ids("The mark on dana@acme.example.org") == []  # another address that contains hers
    assert ids("What did Dana Lee and Mark Stone agree?") == ["Dana Lee", "Mark Stone"]


def test_each_person_once_and_the_rest_of_the_question_kept():
    named = named_in("Dana Lee (dana@acme.example) on pricing", PERSONS)
    assert [n.phrase for n in named] == ["Dana Lee"]
    assert without_names("What did Dana Lee decide on pricing?", named).split() == ["What", "did", "decide", "on",
                                                                                    "pricing?"]
