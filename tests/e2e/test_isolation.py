"""Randomised tenant and permission isolation.

Two tenants with overlapping vocabulary, people (an "alice" in each) and groups ingest documents
with access lists. For every caller view (tenant + principal + groups, or a tenant's unrestricted
admin) a shadow memory holds only the rows that view may see. Thousands of random queries
(with and without as_of, rrf and pursuit, conjunctive or not, different k and C) then run
against the shared memory as that caller and against the shadow as an unrestricted caller:

- every returned row must pass the reference `admits` for the caller's scope;
- `leg_sizes` must equal the shadow's (a hidden row counted anywhere would change them), and
  `matched` too whenever no lexical or tag leg was cut at C;
- vector ranks and scores of rows both return must be equal (cosine depends on nothing else).

Lexical scores may differ: BM25 statistics are global (docs/security.md, known limits); the
test counts those queries instead of failing on them. Then the same views call the HTTP API
with their own keys: query answers equal the in-process ones, and every row and thread view
admits exactly what `admits` admits.
"""

from __future__ import annotations

import os
import random
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from schemas.documents import DocumentIn
from services.core.caller import Caller
from services.core.scope import admits
from tests.conftest import LiveServer, create_key, free_port

pytestmark = pytest.mark.slow

QUERIES = int(os.environ.get("ORGMEM_ISOLATION_QUERIES", "3000"))
HTTP_QUERIES = int(os.environ.get("ORGMEM_ISOLATION_HTTP_QUERIES", "300"))
SEED = int(os.environ.get("ORGMEM_ISOLATION_SEED", "20250611"))
DOCS_PER_TENANT = 110

WORDS = ("budget pricing launch roadmap hiring security audit vendor contract migration outage policy "
         "remote office travel expenses onboarding database latency customer churn forecast quarter "
         "review approval deadline incident payroll laptop compliance retention").split()
THREADS = ["q3-planning", "vendor-review", "incident-42", "hiring-plan", "pricing"]
PEOPLE = {  # principal -> groups; "alice" exists in both tenants on purpose
    "acme": {"alice": ["eng"], "bob": ["sales"], "carol": ["eng", "sales"], "dave": []},
    "globex": {"alice": ["legal"], "erin": ["eng"]},
}


def principal(tenant: str, name: str) -> str:
    return f"{name}@{tenant}.example"


def make_documents(rng: random.Random) -> dict[str, list[DocumentIn]]:
    out: dict[str, list[DocumentIn]] = {}
    shared_texts = [" ".join(rng.sample(WORDS, 8)) for _ in range(15)]  # the same text in both tenants
    for tenant, people in PEOPLE.items():
        names = list(people)
        groups = sorted({g for gs in people.values() for g in gs})
        docs = []
        for i in range(DOCS_PER_TENANT):
            author = principal(tenant, rng.choice(names))
            text = rng.choice(shared_texts) if rng.random() < 0.15 else \
                f"{' '.join(rng.sample(WORDS, rng.randint(5, 12)))} note {i}"
            roll = rng.random()
            if roll < 0.35:
                acl = []
            elif roll < 0.65:
                acl = [principal(tenant, rng.choice(names)).title()]  # case must not matter
            elif roll < 0.9:
                acl = [rng.choice(groups).upper()]
            else:
                acl = [principal(tenant, rng.choice(names)), rng.choice(groups)]
            date = None if rng.random() < 0.1 else datetime(2024, 1, 1, tzinfo=UTC) + timedelta(days=rng.randint(0, 700))
            docs.append(DocumentIn(text=text, author=author, date=date, kind=rng.choice(["email", "ticket", "doc"]),
                                   thread=rng.choice(THREADS), participants=[principal(tenant, rng.choice(names))],
                                   tags=rng.sample(WORDS, 2), acl=acl))
        out[tenant] = docs
    return out


def views() -> list[tuple[str, str, Caller]]:
    """(view name, role, caller) for every principal of every tenant, and each tenant's admin."""
    out = []
    for tenant, people in PEOPLE.items():
        for name, groups in people.items():
            who = principal(tenant, name)
            out.append((f"{tenant}/{name}", "reader", Caller(tenant, frozenset({who, *groups}), who, "reader")))
        out.append((f"{tenant}/admin", "admin", Caller(tenant, None, "admin", "admin")))
    return out


class CachedEncoder:
    """The real query encoder, remembered per text: thousands of queries reuse a few hundred texts."""

    def __init__(self, inner):
        self.inner, self.name, self.dim, self._seen = inner, inner.name, inner.dim, {}

    def encode(self, texts):
        missing = [t for t in texts if t not in self._seen]
        if missing:
            for text, vector in zip(missing, self.inner.encode(missing), strict=True):
                self._seen[text] = vector
        return np.stack([self._seen[t] for t in texts])


def open_memory(settings_cls, data_dir):
    from services.bootstrap import build_memory

    return build_memory(settings_cls(data_dir=data_dir, auth={"rate_limit": "", "failed_auth_limit": ""}))


def as_document(row) -> DocumentIn:
    return DocumentIn(text=row.text, author=row.author, date=row.event_time, kind=row.kind, thread=row.thread,
                      title=row.title, tags=row.tags, participants=row.participants, acl=row.acl,
                      source=row.source, source_id=row.source_id)


def random_query(rng: random.Random) -> dict:
    q = " ".join(rng.sample(WORDS, rng.choice([1, 1, 2, 2, 3])))
    if rng.random() < 0.15:
        q += " " + rng.choice(THREADS)
    return {
        "q": q,
        "as_of": None if rng.random() < 0.5 else datetime(2024, 1, 1, tzinfo=UTC) + timedelta(days=rng.randint(0, 720)),
        "k": rng.choice([1, 3, 5, 10, 20, 50]),
        "candidates": rng.choice([3, 5, 10, 25, 50, 200]),
        "selector": rng.choice(["rrf", "pursuit"]),
        "conjunctive": rng.random() < 0.7,
    }


def run(memory, caller: Caller, spec: dict):
    config = memory.config_for(None, k=spec["k"], candidates=spec["candidates"], selector=spec["selector"],
                               conjunctive=spec["conjunctive"])
    scope = memory.scope_for(caller, as_of=spec["as_of"])
    return memory.query(spec["q"], scope, config), scope


def test_random_queries_never_reach_rows_the_caller_may_not_see(tmp_path, settings, memory):
    from services.settings import Settings

    rng = random.Random(SEED)
    documents = make_documents(rng)
    encoder = CachedEncoder(memory._retriever.embedder)
    memory._retriever.embedder = encoder
    ids: list[str] = []
    for tenant, docs in documents.items():
        for start in range(0, len(docs), 25):
            ids += memory.ingest(docs[start:start + 25], Caller(tenant)).row_ids
    memory.catch_up()
    rows = memory._rows.get_many(list(dict.fromkeys(ids)))
    assert len(rows) > 150, "too few rows stored to test anything"

    shadows, locks = {}, []
    try:
        for name, _, caller in views():
            visible = sorted((r for r in rows.values() if admits(r, memory.scope_for(caller))), key=lambda r: r.ingest_position)
            shadow, lock = open_memory(Settings, tmp_path / "shadow" / name.replace("/", "-"))
            locks.append((shadow, lock))
            shadow._retriever.embedder = encoder
            shadow_ids = shadow.ingest([as_document(r) for r in visible], Caller(caller.tenant)).row_ids
            shadow.catch_up()
            # Row ids of texts are keyed by each data folder's tenant key (services/app/sealing.py), so
            # the shadow names the same documents otherwise: compare through the ingest order.
            original_of = dict(zip(shadow_ids, (r.row_id for r in visible), strict=True))
            assert len(shadow._rows.get_many(shadow_ids)) == len(visible)
            shadows[name] = (caller, shadow, original_of)

        figures = {"queries": 0, "returned_rows": 0, "leaks": 0, "count_mismatches": 0, "matched_compared": 0,
                   "vector_compared": 0, "vector_mismatches": 0, "lexical_score_differs": 0, "same_answer": 0}
        failures: list[str] = []
        started = time.monotonic()
        for _ in range(QUERIES):
            name = rng.choice(list(shadows))
            caller, shadow, original_of = shadows[name]
            spec = random_query(rng)
            got, scope = run(memory, caller, spec)
            want, _ = run(shadow, Caller(caller.tenant), spec)
            wanted_ids = [original_of[s.row.row_id] for s in want.selected]
            figures["queries"] += 1
            figures["returned_rows"] += len(got.selected)
            for sel in got.selected:
                current = memory.stored_row(sel.row.row_id)
                if current is None or not admits(current, scope):
                    figures["leaks"] += 1
                    failures.append(f"{name} {spec}: returned {sel.row.row_id} ({current.tenant if current else '?'}, "
                                    f"acl {current.acl if current else '?'})")
            if got.leg_sizes != want.leg_sizes:
                figures["count_mismatches"] += 1
                failures.append(f"{name} {spec}: leg sizes {got.leg_sizes} != {want.leg_sizes} of the visible rows")
            if want.leg_sizes.get("lex", 0) < spec["candidates"] and want.leg_sizes.get("tag", 0) < spec["candidates"]:
                figures["matched_compared"] += 1
                if got.matched != want.matched:
                    figures["count_mismatches"] += 1
                    failures.append(f"{name} {spec}: matched {got.matched} != {want.matched} of the visible rows")
            theirs = dict(zip(wanted_ids, want.selected, strict=True))
            for sel in got.selected:
                other = theirs.get(sel.row.row_id)
                if other is None:
                    continue
                if "vec" in sel.leg_ranks or "vec" in other.leg_ranks:
                    figures["vector_compared"] += 1
                    score = sel.leg_scores.get("vec", 0)
                    # Rows within float noise of this score may swap places; a hidden row would shift it.
                    ties = sum(abs(x.leg_scores.get("vec", 9) - score) < 1e-6 for x in (*got.selected, *want.selected)) // 2
                    rank_shift = abs(sel.leg_ranks.get("vec", -99) - other.leg_ranks.get("vec", 99))
                    if rank_shift > max(ties - 1, 0) or abs(score - other.leg_scores.get("vec", 0)) > 1e-5:
                        figures["vector_mismatches"] += 1
                        failures.append(f"{name} {spec}: vector rank/score of {sel.row.row_id} differs from the shadow: "
                                        f"{sel.leg_ranks.get('vec')}/{sel.leg_scores.get('vec')} != "
                                        f"{other.leg_ranks.get('vec')}/{other.leg_scores.get('vec')}")
                if abs(sel.leg_scores.get("lex", 0) - other.leg_scores.get("lex", 0)) > 1e-4:
                    figures["lexical_score_differs"] += 1
            figures["same_answer"] += [s.row.row_id for s in got.selected] == wanted_ids
        figures["seconds"] = round(time.monotonic() - started, 1)
        print(f"\nisolation (seed {SEED}, {len(rows)} rows, {len(shadows)} views): {figures}")
        assert figures["queries"] >= QUERIES and figures["returned_rows"] > QUERIES  # it did look at rows
        assert failures == [], f"{len(failures)} violations, first: {failures[:5]}"
        assert figures["leaks"] == 0 and figures["count_mismatches"] == 0 and figures["vector_mismatches"] == 0
        assert figures["matched_compared"] > QUERIES // 4 and figures["vector_compared"] > QUERIES

        over_http(settings, memory, rows, shadows, rng)
    finally:
        for shadow, lock in locks:
            shadow.close()
            lock.release()


def over_http(settings, memory, rows, shadows, rng):
    """Each view through its own API key: the same answers, and row/thread views that admit exactly
    what the reference admits."""
    from services.api.app import create_app

    keys = {}
    for name, (caller, _, _) in shadows.items():
        tenant, who = name.split("/")
        groups = sorted(caller.readers - {principal(tenant, who)}) if caller.readers is not None else []
        keys[name] = create_key(settings.data_dir, role="admin" if caller.readers is None else "reader", tenant=tenant,
                                principal=principal(tenant, who) if who != "admin" else "admin", groups=tuple(groups))
    row_checks = queries = 0
    with LiveServer(create_app(settings, memory), free_port()) as server:
        for _ in range(HTTP_QUERIES):
            name = rng.choice(list(shadows))
            caller = shadows[name][0]
            spec = random_query(rng)
            body = {**spec, "as_of": spec["as_of"].isoformat() if spec["as_of"] else None}
            answer = server.client.post("/v1/query", json=body, headers={"Authorization": f"Bearer {keys[name]}"})
            assert answer.status_code == 200, answer.text
            expected, _ = run(memory, caller, spec)
            assert [r["row_id"] for r in answer.json()["rows"]] == [s.row.row_id for s in expected.selected], name
            assert answer.json()["matched"] == expected.matched and answer.json()["leg_sizes"] == expected.leg_sizes
            queries += 1
        for name, (caller, _, _) in shadows.items():
            headers = {"Authorization": f"Bearer {keys[name]}"}
            scope = memory.scope_for(caller)
            for row in rows.values():
                status = server.client.get(f"/v1/rows/{row.row_id}", headers=headers).status_code
                assert status == (200 if admits(row, scope) else 404), f"{name} GET /v1/rows/{row.row_id}: {status}"
                row_checks += 1
            for thread in THREADS:
                response = server.client.get(f"/v1/threads/{thread}", headers=headers)
                expected_ids = {r.row_id for r in rows.values() if r.thread == thread and admits(r, scope)}
                got_ids = {r["row_id"] for r in response.json().get("rows", [])} if response.status_code == 200 else set()
                assert got_ids == expected_ids, f"{name} thread {thread}"
    print(f"isolation over HTTP: {queries} queries, {row_checks} row reads, {len(shadows) * len(THREADS)} thread views; 0 leaks")
