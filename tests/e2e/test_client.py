"""orgmem.client against a real server (uvicorn, the embedded memory, the real encoder): reads
its own writes, reaches every route, raises each refusal as its exception with the problem
details, and retries 429/503 as the server asks; the retry tests use a small local HTTP server
that answers what a test scripts."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from orgmem.client import (
    AsyncClient,
    Client,
    Conflict,
    ConnectionFailed,
    Forbidden,
    Gone,
    InvalidRequest,
    NotFound,
    OrgmemError,
    RateLimited,
    RetryPolicy,
    Unauthorized,
    Unavailable,
)
from schemas.api import QueryRequest
from tests.conftest import create_key

FAST = RetryPolicy(attempts=4, total_s=20, base_delay_s=0.01, max_delay_s=0.05)
DOCS = [
    {"text": "Remote work policy: every team may work remotely 2 days per week.", "author": "maria",
     "date": "2025-03-10", "thread": "policy/remote"},
    {"text": "Remote work policy: every team may work remotely 3 days per week.", "author": "maria",
     "date": "2025-06-16", "thread": "policy/remote"},
    {"text": "The cafeteria opens at eight.", "author": "kim", "date": "2025-04-01"},
]


def sent_bodies(client_kwargs: dict) -> list[dict]:
    """Records the JSON body of every query the client sends (an httpx request hook)."""
    seen: list[dict] = []

    def hook(request):
        if request.url.path == "/v1/query":
            seen.append(json.loads(request.content))

    client_kwargs["event_hooks"] = {"request": [hook]}
    return seen


def test_a_write_is_read_by_the_next_query(live_server):
    options: dict = {}
    bodies = sent_bodies(options)
    with Client(live_server.url, live_server.token, **options) as client:
        assert client.last_position is None
        client.query("anything")
        assert "after" not in bodies[-1]  # nothing written yet: no wait
        written = client.ingest(DOCS)
        assert len(written.row_ids) == 3 and client.last_position == written.position
        answer = client.query("remote work policy", k=5)
        assert bodies[-1]["after"] == written.position
        assert answer.applied_position >= written.position
        assert written.row_ids[1] in {hit.row_id for hit in answer.rows}
        client.query("remote work policy", after=None)  # told otherwise: no wait
        assert "after" not in bodies[-1] or bodies[-1]["after"] is None
        again = client.ingest([{"text": "Parking permits are renewed in May.", "author": "lee"}])
        assert again.position > written.position
        client.query("parking permits")
        assert bodies[-1]["after"] == again.position
    # Another client did not write: it does not wait.
    with Client(live_server.url, live_server.token, **options) as other:
        other.query("parking permits")
        assert "after" not in bodies[-1]


def inbox_with_mail(settings) -> Path:
    inbox = Path(settings.data_dir) / "inbox" / "default"
    inbox.mkdir(parents=True)
    (inbox / "one.eml").write_bytes(b"Message-ID: <client-1@x>\nDate: Tue, 14 Nov 2000 08:22:00 -0800\n"
                                    b"From: a@corp.example\nTo: b@corp.example\nSubject: budget\n\nThe budget is 5.\n")
    outside = Path(settings.data_dir).parent / "outside.eml"
    outside.write_bytes(b"Message-ID: <client-2@x>\nFrom: a@x\n\nnot for this tenant\n")
    (inbox / "bad.eml").symlink_to(outside)  # leads out of the connector roots: a dead letter
    return inbox


def test_every_route(live_server, settings):
    with Client(live_server.url, live_server.token, retry=FAST) as client:
        assert client.health() == {"status": "ok"}
        assert client.ready()["status"] == "ready"
        assert "orgmem_" in client.metrics()
        written = client.ingest(DOCS)
        answer = client.query(QueryRequest(q="remote work policy", as_of="2025-05-01T00:00:00Z", k=5))
        assert answer.rows and answer.rows[0].row_id == written.row_ids[0]  # the version in force then
        row = client.row(written.row_ids[1])
        assert row.row.text == DOCS[1]["text"] and row.history
        thread = client.thread("policy/remote")
        assert [r.row_id for r in thread.rows] == written.row_ids[:2]
        assert client.stats().rows["active"] >= 3

        report = client.run_connector("email", [str(inbox_with_mail(settings))])
        assert report.documents == 1 and [Path(d["path"]).name for d in report.dead_letters] == ["bad.eml"]
        assert client.last_position == report.log_position  # a connector run is a write too
        letters = client.dead_letters(limit=10)
        assert letters.total >= 1 and any(d.path.endswith("bad.eml") for d in letters.dead_letters)

        made = client.create_key("client-reader", "reader", name="from the client")
        assert made.token.startswith("om_") and made.key.role == "reader"
        assert made.key.key_id in {k.key_id for k in client.list_keys().keys}
        assert client.revoke_key(made.key.key_id).revoked_at is not None
        with pytest.raises(Unauthorized):
            Client(live_server.url, made.token, retry=FAST).stats()

        started = client.consolidate(tau=0.85)
        assert started.job == "consolidate" and started.status == "queued"
        assert client.wait_for_run(started.run_id, timeout_s=120).status == "finished"
        assert client.run(started.run_id).run_id == started.run_id
        assert started.run_id in {r.run_id for r in client.runs().runs}
        assert client.run_decisions(started.run_id).run_id == started.run_id
        refined = client.refine(budget_fraction=0.9, max_calls=5)
        assert client.wait_for_run(refined.run_id, timeout_s=120).status == "finished"
        revert = client.revert_run(started.run_id)
        assert revert.reverts == started.run_id
        client.wait_for_run(revert.run_id, timeout_s=120)
        with pytest.raises(Conflict) as twice:
            client.revert_run(started.run_id)
        assert twice.value.status == 409 and twice.value.type.endswith("/conflict")


def test_erasure_backup_and_export_routes(live_server):
    with Client(live_server.url, live_server.token, retry=FAST) as client:
        written = client.ingest(DOCS)
        client.query("remote work", k=3)  # indexed now
        exported = client.export()
        assert [r.row.row_id for r in exported] == written.row_ids and all(r.history for r in exported)
        hold = client.hold_projector(seconds=30)
        assert hold.checkpoint >= written.position
        assert client.release_projector(hold.hold_id).held_throughout is True
        erased = client.erase("asked by the author", row_id=written.row_ids[2])
        assert erased.row_ids == [written.row_ids[2]] and client.last_position == erased.position
        with pytest.raises(Gone) as gone:
            client.row(written.row_ids[2])
        assert gone.value.status == 410 and "erased" in gone.value.detail
        assert [r.row.row_id for r in client.export()] == written.row_ids[:2]


def test_refusals_raise_their_exception_with_problem_details(live_server, settings):
    with Client(live_server.url, "om_000000000000_not-a-key", retry=FAST) as stranger:
        with pytest.raises(Unauthorized) as refused:
            stranger.query("anything")
    problem = refused.value
    assert problem.status == 401 and problem.type == "https://orgmem.dev/problems/unauthorized"
    assert problem.title == "Unauthorized" and "API key" in problem.detail

    reader = create_key(settings.data_dir, role="reader", principal="ria")
    with Client(live_server.url, reader, retry=FAST) as client:
        with pytest.raises(Forbidden) as forbidden:
            client.stats()
        assert forbidden.value.status == 403 and "admin" in forbidden.value.detail
        with pytest.raises(Forbidden):
            client.ingest([{"text": "a reader may not write"}])
        with pytest.raises(NotFound) as missing:
            client.row("r" + "0" * 23)
        assert missing.value.status == 404 and missing.value.type.endswith("/not-found")
        with pytest.raises(InvalidRequest) as too_many:
            client.query("policy", k=100_000)  # the model allows it; the server's limit does not
        assert too_many.value.status == 422 and "k: at most" in too_many.value.detail
        # Rows per leg bound what each leg fetches (tantivy's first fetch is 4x them): over the limit, refused.
        with pytest.raises(InvalidRequest) as too_wide:
            client.query("policy", candidates=settings.limits.max_candidates + 1)
        assert too_wide.value.status == 422 and f"candidates: at most {settings.limits.max_candidates}" in too_wide.value.detail
        assert client.query("policy", candidates=settings.limits.max_candidates).rows is not None
        with pytest.raises(InvalidRequest) as empty:
            client.query(QueryRequest.model_construct(q=""))  # past the client's own check
        assert empty.value.fields == ["q"] and empty.value.errors[0].problem
        with pytest.raises(InvalidRequest) as beyond:
            client.query("policy", after=10**9)
        assert "past the log head" in beyond.value.detail
        for other_lane in (2**47 + 1, 63 * 2**47 + 5):  # a token of a lane (partition) this log does not have
            with pytest.raises(InvalidRequest) as no_lane:
                client.query("policy", after=other_lane)
            assert "past the log head" in no_lane.value.detail
    assert all(isinstance(e.value, OrgmemError) for e in (refused, forbidden, missing, too_many, empty))


class Scripted:
    """A local HTTP server that answers each request with the next scripted (status, headers, body);
    a None entry closes the connection without answering."""

    def __init__(self, script):
        self.script, self.seen = list(script), []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                outer.seen.append((time.monotonic(), self.command, self.path, body))
                entry = outer.script.pop(0) if len(outer.script) > 1 else outer.script[0]
                if entry is None:  # the server drops the connection: the client gets no answer
                    self.close_connection = True
                    return
                status, headers, payload = entry
                data = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


BUSY = (429, {"Retry-After": "1", "Content-Type": "application/problem+json"},
        {"type": "https://orgmem.dev/problems/rate-limited", "title": "Too many requests", "status": 429,
         "detail": "rate limit reached; retry in 1 s"})
STATS = (200, {}, {"log_head": 7, "applied_position": 7, "rows": {"active": 3}})


def test_a_429_is_retried_after_what_retry_after_says():
    with Scripted([BUSY, STATS]) as server, Client(server.url, "om_x", retry=FAST) as client:
        started = time.monotonic()
        assert client.stats().log_head == 7
        assert len(server.seen) == 2
        assert server.seen[1][0] - server.seen[0][0] >= 0.95  # waited as asked, not FAST's 0.05 s
        assert time.monotonic() - started < 5


def test_a_retry_after_past_the_total_time_raises_at_once():
    long_wait = (503, {"Retry-After": "120", "Content-Type": "application/problem+json"},
                 {"title": "Not indexed yet", "status": 503, "detail": "after: not indexed", "retry_after_s": 120})
    with Scripted([long_wait]) as server, Client(server.url, retry=FAST) as client:
        started = time.monotonic()
        with pytest.raises(Unavailable) as unavailable:
            client.query("x", after=1)
        assert time.monotonic() - started < 2 and len(server.seen) == 1
        assert unavailable.value.retry_after_s == 120 and unavailable.value.problem.retry_after_s == 120


def test_attempts_are_bounded_and_a_write_is_not_resent_after_a_lost_connection():
    busy_now = (429, {**BUSY[1], "Retry-After": "0"}, BUSY[2])
    with Scripted([busy_now]) as server, \
            Client(server.url, retry=RetryPolicy(attempts=3, base_delay_s=0.01)) as client:
        with pytest.raises(RateLimited) as limited:
            client.ingest([{"text": "hello"}])  # 429 means not done: a write is sent again too
        assert len(server.seen) == 3 and limited.value.status == 429
    with Scripted([None]) as server, Client(server.url, retry=FAST) as client:
        with pytest.raises(ConnectionFailed):
            client.ingest([{"text": "hello"}])
        assert len(server.seen) == 1  # it may have landed: never sent twice
        with pytest.raises(ConnectionFailed):
            client.stats()
        assert len(server.seen) == 1 + FAST.attempts  # a read is safe to repeat


def test_the_async_client_does_the_same(live_server, settings):
    async def scenario():
        async with AsyncClient(live_server.url, live_server.token, retry=FAST) as client:
            assert (await client.health())["status"] == "ok"
            written = await client.ingest(DOCS)
            assert client.last_position == written.position
            answer = await client.query("remote work policy", k=5)
            assert answer.applied_position >= written.position
            assert written.row_ids[1] in {hit.row_id for hit in answer.rows}
            assert (await client.row(written.row_ids[0])).row.author == "maria"
            with pytest.raises(NotFound):
                await client.thread("no/such/thread")
            started = await client.consolidate()
            assert (await client.wait_for_run(started.run_id, timeout_s=120)).status == "finished"
        async with AsyncClient(live_server.url, "om_000000000000_nope") as stranger:
            with pytest.raises(Unauthorized) as refused:
                await stranger.stats()
            assert refused.value.type.endswith("/unauthorized")
        with Scripted([BUSY, STATS]) as server:
            async with AsyncClient(server.url, retry=FAST) as client:
                assert (await client.stats()).rows == {"active": 3}
            assert server.seen[1][0] - server.seen[0][0] >= 0.95

    asyncio.run(scenario())


def test_both_clients_offer_the_same_methods():
    def public(cls):
        return {name: member for name, member in vars(cls).items() if not name.startswith("_") and callable(member)}

    sync, async_ = public(Client), public(AsyncClient)
    assert set(sync) == set(async_) and len(sync) >= 20
    for name, method in sync.items():
        assert inspect.signature(method) == inspect.signature(async_[name]), name
        assert inspect.iscoroutinefunction(async_[name]) != (name in ("forget_writes",)), name


def test_the_client_reaches_every_route_of_the_api(live_server):
    """Each API route of the server is the target of one of the client's calls (a new route fails
    here until the client has a method for it)."""
    from fastapi.routing import APIRoute

    from orgmem.client import calls

    reached = [calls.health(), calls.ready(), calls.metrics(), calls.stats(), calls.ingest([{"text": "x"}]),
               calls.query("x", {}), calls.row("r1"), calls.thread("a/b"), calls.run_connector("email", ["/x"], {}),
               calls.dead_letters(), calls.list_keys(), calls.create_key("p", "reader", {}), calls.revoke_key("k1"),
               calls.erase("why", {"row_id": "r1"}), calls.hold_projector(), calls.release_projector("h1"),
               calls.export(), calls.consolidate({}), calls.refine({"budget_fraction": 0.5}), calls.runs(),
               calls.run("run1"), calls.run_decisions("run1"), calls.revert_run("run1")]
    routes = [route for route in live_server.server.config.app.routes if isinstance(route, APIRoute)
              and (route.path.startswith("/v1/") or route.path in ("/healthz", "/readyz", "/metrics"))]
    missing = [f"{method} {route.path}" for route in routes for method in route.methods
               if not any(call.method == method and route.path_regex.match(call.path) for call in reached)]
    assert missing == [], "routes the client cannot call"
