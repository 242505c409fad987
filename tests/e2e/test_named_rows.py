"""A question that names a document by its source id (a Message-ID, a ticket key) gets that
document first, through the HTTP API, and only where the caller may read it: the lookup runs
inside the caller's scope, so guessing another tenant's or another group's ids finds nothing."""

from __future__ import annotations

import pytest

from tests.conftest import create_key

pytestmark = pytest.mark.slow

MESSAGE_ID = "11700608.1075840047233.JavaMail.mail@relay"
NAMED = {"text": "Lunch moved to Thursday, the room is booked.", "date": "2025-03-04", "kind": "email",
         "author": "rita@corp.example", "source": "mail-archive", "source_id": MESSAGE_ID}
# Mail that holds every word of the question but not the id: each outranks the named one on text.
FILLER = [{"text": f"Open the email in the inbox folder: it was sent to the team, message {i}.", "date": "2025-03-05",
           "kind": "email", "author": "sam@corp.example", "source": "mail-archive", "source_id": f"filler-{i}@relay"}
          for i in range(30)]
QUESTION = f"Open the email with Message-ID <{MESSAGE_ID}> in the inbox folder. Who was it sent to?"


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def ingest(client, documents, headers=None) -> tuple[list[str], int]:
    answer = client.post("/v1/documents", headers=headers or {}, json={"documents": documents})
    assert answer.status_code == 200, answer.text
    return answer.json()["row_ids"], answer.json()["position"]


def ask(client, question, headers=None, **extra) -> list[dict]:
    answer = client.post("/v1/query", headers=headers or {}, json={"q": question, "k": 5, **extra})
    assert answer.status_code == 200, answer.text
    return answer.json()["rows"]


def test_the_named_message_comes_first_and_only_under_the_default(live_server):
    client = live_server.client
    [named_id, *_], after = ingest(client, [NAMED, *FILLER])
    rows = ask(client, QUESTION, after=after)
    assert (rows[0]["row_id"], rows[0]["reason"]) == (named_id, "named") and len(rows) == 5
    assert named_id not in [r["row_id"] for r in ask(client, QUESTION, preset="paper-orgmembench")]
    # Before the mail's date it is not in the caller's view, named or not.
    assert named_id not in [r["row_id"] for r in ask(client, QUESTION, as_of="2025-03-01T00:00:00Z")]


def test_ids_of_rows_the_caller_may_not_read_find_nothing(live_server, settings):
    client = live_server.client
    secret = {**NAMED, "source_id": "FIN-2025-0042", "acl": ["finance"], "text": "Budget cut: 12 percent."}
    [secret_id, *_], _ = ingest(client, [secret, *FILLER])
    other_tenant = bearer(create_key(settings.data_dir, role="writer", tenant="globex", principal="ops@globex"))
    [globex_id], after = ingest(client, [{**NAMED, "text": "Globex only."}], other_tenant)
    alice = bearer(create_key(settings.data_dir, role="reader", principal="alice@corp.example", groups=("eng",)))
    fay = bearer(create_key(settings.data_dir, role="reader", principal="fay@corp.example", groups=("finance",)))
    guess = "What does FIN-2025-0042 say?"
    assert secret_id not in str(ask(client, guess, alice, after=after))
    first = ask(client, guess, fay)[0]
    assert (first["row_id"], first["reason"]) == (secret_id, "named")
    # The same Message-ID in another tenant: each tenant finds its own row, never the other's.
    assert globex_id not in str(ask(client, QUESTION, fay))
    globex_reader = bearer(create_key(settings.data_dir, role="reader", tenant="globex", principal="r@globex"))
    first = ask(client, QUESTION, globex_reader)[0]
    assert (first["row_id"], first["reason"]) == (globex_id, "named")
