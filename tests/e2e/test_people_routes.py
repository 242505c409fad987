"""The people directory over real HTTP (issue 42, docs/people.md): a caller sees only people met
in rows it may read; another tenant's and a private group's people never appear in the list, a
person page, or the `people` query filter, and a guessed id of a person met only in private rows
is a 404."""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import UTC, datetime

import httpx

from schemas.rows import Row
from services.core.people import build
from tests.conftest import LiveServer, create_key, free_port


@contextmanager
def served(data):
    from services.api.app import create_app
    from services.bootstrap import build_memory
    from services.settings import Settings

    settings = Settings(data_dir=data, indexer_poll_s=0.05, embedder={"encoder_processes": 1},
                        auth={"rate_limit": "", "failed_auth_limit": ""})
    memory, lock = build_memory(settings)
    try:
        with LiveServer(create_app(settings, memory), free_port()) as server:
            yield server, memory
    finally:
        memory.close()
        lock.release()


def call(server, token, method, path, **kw) -> httpx.Response:
    return httpx.request(method, server.url + path, headers={"Authorization": f"Bearer {token}"}, timeout=60, **kw)


def acme_keys(data) -> tuple[str, str, str]:
    """A writer in the board group, a reader outside it (eng) and a reader in it."""
    return (create_key(data, role="writer", principal="walt@acme.example", groups=("board",)),
            create_key(data, role="reader", principal="rita@acme.example", groups=("eng",)),
            create_key(data, role="reader", principal="bo@acme.example", groups=("board",)))


def write(server, token, documents) -> dict:
    """POST the documents; the acknowledgement (row ids, position)."""
    made = call(server, token, "POST", "/v1/documents", json={"documents": documents})
    assert made.status_code == 200, made.text
    return made.json()


DOCS = [
    {"text": "Pricing plan for May", "author": "Dana Lee <dana@acme.example>", "participants": ["sam@acme.example"]},
    {"text": "Pricing follow-up", "author": "dana@acme.example", "date": "2026-03-01T00:00:00Z"},
    {"text": "Pricing notes by Dana Li", "author": "Dana Li <dana@acme-corp.example>"},
    {"text": "Pricing secret merger", "author": "Vera Secret <vera@acme.example>", "acl": ["group:board"],
     "participants": ["Hidden Helper"]},
]


def test_people_are_scoped_to_tenant_and_readable_rows(tmp_path):
    data = tmp_path / "data"
    writer, reader, board = acme_keys(data)
    globex = create_key(data, role="writer", tenant="globex", principal="gus@globex.example")
    with served(data) as (server, memory):
        made = write(server, writer, DOCS)
        gx = call(server, globex, "POST", "/v1/documents",
                  json={"documents": [{"text": "Pricing at globex", "author": "Gail Other <gail@globex.example>"}]})
        position = max(made["position"], gx.json()["position"])
        assert call(server, writer, "POST", "/v1/query", json={"q": "pricing", "after": position}).status_code == 200

        listed = call(server, reader, "GET", "/v1/people")
        assert listed.status_code == 200, listed.text
        names = {p["display_name"] for p in listed.json()["people"]}
        assert names == {"Dana Lee", "Dana Li", "sam@acme.example"}
        dana = next(p for p in listed.json()["people"] if p["display_name"] == "Dana Lee")
        assert set(dana["aliases"]) == {"Dana Lee <dana@acme.example>", "dana@acme.example"}
        assert dana["roles"] == {"author": 2}

        board_names = {p["display_name"] for p in call(server, board, "GET", "/v1/people").json()["people"]}
        assert {"Vera Secret", "Hidden Helper"} <= board_names
        assert "Gail Other" not in board_names
        gx_names = {p["display_name"] for p in call(server, globex, "GET", "/v1/people").json()["people"]}
        assert gx_names == {"Gail Other"}

        # The ids the private rows give their people, computed as the server would: guessed, 404.
        secret_ids = list(build([r for r in memory.rows_in_scope(memory.scope_for(_system("default")))
                                 if r.acl]))
        assert len(secret_ids) == 2
        for person_id in secret_ids:
            assert call(server, reader, "GET", f"/v1/people/{person_id}").status_code == 404
            assert call(server, globex, "GET", f"/v1/people/{person_id}").status_code == 404
            assert call(server, board, "GET", f"/v1/people/{person_id}").status_code == 200
            refused = call(server, reader, "POST", "/v1/query", json={"q": "pricing", "people": [person_id]})
            assert refused.status_code == 422 and "unknown person" in refused.text
        gail = call(server, globex, "GET", "/v1/people").json()["people"][0]["person_id"]
        assert call(server, reader, "GET", f"/v1/people/{gail}").status_code == 404

        page = call(server, reader, "GET", f"/v1/people/{dana['person_id']}")
        assert page.status_code == 200, page.text
        authored = page.json()["rows"]["author"]
        assert len(authored) == 2 and authored[0]["date"] is not None  # dated first, newest first
        assert set(page.json()["rows"]) == {"author"}  # roles without rows are left out

        hits = call(server, reader, "POST", "/v1/query", json={"q": "pricing", "people": [dana["person_id"]]})
        assert hits.status_code == 200, hits.text
        authors = [h["author"] for h in hits.json()["rows"]]
        assert sorted(authors) == ["Dana Lee <dana@acme.example>", "dana@acme.example"]

        assert [p["display_name"] for p in call(server, reader, "GET", "/v1/people",
                                                  params={"q": "dana li"}).json()["people"]] == ["Dana Li"]
        first = call(server, reader, "GET", "/v1/people", params={"limit": 2}).json()
        rest = call(server, reader, "GET", "/v1/people", params={"limit": 2, "offset": first["next_offset"]}).json()
        assert len(first["people"]) == 2 and len(rest["people"]) == 1 and rest["next_offset"] is None
        assert call(server, reader, "GET", "/v1/people/" + "x" * 65).status_code == 422
        assert call(server, reader, "GET", "/v1/people", params={"limit": 10_000}).status_code == 422


def _system(tenant):
    from services.core.caller import Caller

    return Caller(tenant=tenant)


def test_people_rule_reads_only_persons_the_caller_may_see_and_ranks_their_rows(tmp_path):
    data = tmp_path / "data"
    writer, reader, board = acme_keys(data)
    with served(data) as (server, memory):
        after = write(server, writer, DOCS)["position"]

        def ask(token, q, **extra):
            r = call(server, token, "POST", "/v1/query", json={"q": q, "after": after, **extra})
            assert r.status_code == 200, r.text
            return r.json()

        # Met only in a board row: to an eng reader, Vera is no one, and her row never comes back.
        hidden = ask(reader, "What did Vera Secret say about pricing?", people_rules=True)
        assert hidden["people_named"] == []
        assert all("Vera" not in row["author"] for row in hidden["rows"])
        seen = ask(board, "What did Vera Secret say about pricing?", people_rules=True)
        assert [n["phrase"] for n in seen["people_named"]] == ["Vera Secret"]
        assert seen["leg_sizes"].get("people") == 1
        assert [row["author"] for row in seen["rows"] if "people" in row["leg_ranks"]] == [
            "Vera Secret <vera@acme.example>"]

        # Dana Lee's rows lead; Dana Li (a look-alike) is not read as her.
        dana = ask(reader, "What did Dana Lee write on pricing?", people_rules=True)
        assert len(dana["people_named"]) == 1
        in_leg = {row["author"] for row in dana["rows"] if "people" in row["leg_ranks"]}
        assert in_leg == {"Dana Lee <dana@acme.example>", "dana@acme.example"}
        assert ask(reader, "What did Dana Lee write on pricing?")["people_named"] is None  # switched off


def test_a_people_filter_with_after_sees_the_rows_that_write_acknowledged(tmp_path):
    # The filter's persons were once read before `after` was waited for: a person written in the
    # same batch was "unknown" (422) to the query that asked for exactly that write.
    data = tmp_path / "data"
    writer = create_key(data, role="writer", principal="walt@acme.example", groups=("board",))
    with served(data) as (server, _memory):
        doc = {"text": "Freshly written pricing note", "author": "Nova Quick <nova@acme.example>"}
        row = Row(row_id="x", tenant="default", text="x", author=doc["author"], ingest_position=1,
                  ingested_at=datetime(2026, 1, 1, tzinfo=UTC))
        person_id = next(iter(build([row])))
        made = call(server, writer, "POST", "/v1/documents", json={"documents": [doc]})
        assert made.status_code == 200, made.text
        found = call(server, writer, "POST", "/v1/query", json={"q": "pricing", "people": [person_id],
                                                                "after": made.json()["position"]})
        assert found.status_code == 200, found.text
        assert [r["author"] for r in found.json()["rows"]] == [doc["author"]]


def test_an_erased_subject_leaves_the_people_routes_including_where_only_mentioned(tmp_path):
    # The directory is a cache of names: after a subject's erasure, neither the rows they wrote nor
    # a thread that @-mentions them (a mention: tag seals the row with their key too) lists them.
    data = tmp_path / "data"
    writer, reader, _board = acme_keys(data)
    admin = create_key(data, principal="ops@acme.example")
    with served(data) as (server, _memory):
        after = write(server, writer, [
            {"text": "Erin's own pricing notes", "author": "Erin Vale <erin@acme.example>"},
            {"text": "Pricing: ask @Erin Vale", "author": "Dana Lee <dana@acme.example>", "tags": ["mention:Erin Vale"]},
            {"text": "Pricing stays as it is", "author": "Dana Lee <dana@acme.example>"}])["position"]
        assert call(server, reader, "POST", "/v1/query", json={"q": "pricing", "after": after}).status_code == 200

        def listed() -> dict[str, dict]:
            answer = call(server, reader, "GET", "/v1/people", params={"limit": 500})
            assert answer.status_code == 200, answer.text
            return {p["display_name"]: p for p in answer.json()["people"]}

        before = listed()
        assert before["Erin Vale"]["roles"] == {"author": 1, "mentioned": 1}, before["Erin Vale"]
        erased = call(server, admin, "POST", "/v1/admin/erasures",
                      json={"subject": "Erin Vale <erin@acme.example>", "reason": "leaver's request"})
        assert erased.status_code == 201, erased.text
        assert erased.json()["rows"] == 2  # her own row and the thread that mentions her
        assert call(server, reader, "POST", "/v1/query",
                    json={"q": "pricing", "after": erased.json()["position"]}).status_code == 200
        now = listed()
        assert "Erin Vale" not in now and "Dana Lee" in now
        assert not any("erin" in alias.lower() for p in now.values() for alias in p["aliases"])
        gone = call(server, reader, "GET", f"/v1/people/{before['Erin Vale']['person_id']}")
        assert gone.status_code == 404, gone.text
        dana = call(server, reader, "GET", f"/v1/people/{now['Dana Lee']['person_id']}").json()
        assert len(dana["rows"]["author"]) == 1 and "erin" not in json.dumps(dana).lower()


def test_a_question_naming_a_person_gets_their_decision_even_where_a_later_one_replaced_it(tmp_path):
    # "What did Finn decide" asks for Finn's decision. Without the rule the version order puts the
    # later decision that restates it first (and, at k=1, in its place); with it, Finn's row is
    # what the question asked for and stays, and its version note names the row in force.
    data = tmp_path / "data"
    writer, reader, _ = acme_keys(data)
    decisions = [
        {"text": "Decision: the minimum test coverage for merges is 80 percent from now on.",
         "author": "Finn Gallagher <finn@acme.example>", "date": "2025-01-10T00:00:00Z", "thread": "coverage"},
        {"text": "Decision: the minimum test coverage for merges is 70 percent from now on.",
         "author": "Rafael Quintero <rafael@acme.example>", "date": "2025-03-10T00:00:00Z", "thread": "coverage"},
        {"text": "Lunch menu for the offsite", "author": "sam@acme.example", "date": "2025-02-01T00:00:00Z"},
    ]
    with served(data) as (server, memory):
        made = write(server, writer, decisions)
        finn, rafael = made["row_ids"][0], made["row_ids"][1]

        def top(**extra):
            r = call(server, reader, "POST", "/v1/query", json={
                "q": "What did Finn Gallagher decide about the minimum test coverage for merges?", "k": 1,
                "after": made["position"], **extra})
            assert r.status_code == 200, r.text
            return r.json()["rows"][0]

        assert top()["row_id"] == rafael
        named = top(people_rules=True)
        assert named["row_id"] == finn
        assert named["version"]["latest_row_id"] == rafael
