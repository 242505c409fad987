"""Sealing (services/app/sealing.py) over a real SQLite key store: a document opens only while
every one of its keys lives, nothing in the sealed event names anyone, a ciphertext moved to
another event does not open, and a subject's key generation moves on after an erasure."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from schemas.documents import DocumentIn
from schemas.events import DocumentObserved, LoggedEvent, event_to_json
from services.adapters.key_store.data_keys_sqlite import SqliteDataKeyStore
from services.app.sealing import Sealer, name_forms, subjects_of
from services.core.write_rules import row_id_for

DOC = DocumentIn(text="Budget for the Lisbon office", author="Ann Lee <ann@x.org>", participants=["Bo Chen"],
                 tags=["speaker:Cy Dee", "label:finance"], title="Lisbon budget", source="api", source_id="m-1")


@pytest.fixture
def sealer(tmp_path):
    store = SqliteDataKeyStore(tmp_path / "data-keys.sqlite")
    yield Sealer(store)
    store.close()


def _logged(event) -> LoggedEvent:
    return LoggedEvent(position=1, appended_at=datetime.now(UTC), event=event)


def _seal(sealer: Sealer, doc: DocumentIn = DOC):
    event = DocumentObserved(row_id=sealer.row_id_for("default", doc), document=doc)
    [sealed] = sealer.seal([event])
    return sealed


def test_people_are_matched_in_every_form_they_appear_in():
    assert name_forms("  Ann  LEE <Ann@X.org> ") == {"ann lee <ann@x.org>", "ann lee", "ann@x.org"}
    assert subjects_of(DOC) >= {"ann lee", "ann@x.org", "bo chen", "cy dee"}
    assert "finance" not in subjects_of(DOC)


def test_a_sealed_document_opens_and_names_no_one_in_clear(sealer):
    sealed = _seal(sealer)
    body = event_to_json(sealed).lower()
    for clear in ("lisbon", "ann", "bo chen", "cy dee", "m-1", "finance"):
        assert clear not in body
    assert sealed.document is None and sealed.version == 2 and len(sealed.sealed.keys) >= 6
    [opened] = sealer.open([_logged(sealed)])
    assert opened.event.document == DOC


@pytest.mark.parametrize("which", ["own", "text", "subject"])
def test_destroying_any_one_key_makes_it_unreadable(sealer, which):
    sealed = _seal(sealer)
    keys = sealed.sealed.keys
    victim = {"own": keys[0], "text": keys[1], "subject": keys[-1]}[which]
    sealer.keys.destroy([victim], "e1")
    [opened] = sealer.open([_logged(sealed)])
    assert opened.event.document is None


def test_a_ciphertext_moved_to_another_event_does_not_open(sealer):
    sealed = _seal(sealer)
    moved = sealed.model_copy(update={"row_id": "r" + "0" * 23})
    sealer.keys.obtain([f"d.{moved.row_id}"])
    assert sealer.open([_logged(moved)])[0].event.document is None


def test_text_ids_are_keyed_and_source_ids_stay_public(sealer):
    text_only = DocumentIn(text="hello", author="ann")
    assert sealer.row_id_for("default", text_only) != row_id_for("default", text_only)
    assert sealer.row_id_for("default", text_only) == sealer.row_id_for("default", text_only)
    assert sealer.row_id_for("default", DOC) == row_id_for("default", DOC)


def test_an_erased_document_is_not_sealed_again_and_a_subject_gets_a_fresh_key(sealer):
    sealed = _seal(sealer)
    subject_key = sealer.subject_key_ids("default", ["bo chen"])["bo chen"]
    sealer.keys.destroy([sealed.sealed.keys[0], subject_key], "e1")
    assert sealer.seal([DocumentObserved(row_id=sealed.row_id, document=DOC)]) == []
    later = DocumentIn(text="A new note", author="Bo Chen")
    fresh = _seal(sealer, later)
    assert subject_key not in fresh.sealed.keys
    assert sealer.subject_key_ids("default", ["bo chen"])["bo chen"].endswith(".1")
    assert sealer.open([_logged(fresh)])[0].event.document == later
