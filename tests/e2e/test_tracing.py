"""OpenTelemetry traces over a real server: a query over HTTP gives a request span with the query's
stage spans below it, projection batches give spans of their own, no span carries text, and with
tracing off nothing is traced. Spans go to the SDK's in-memory exporter beside the OTLP/HTTP export,
which is received by a small local collector (the one remote endpoint a test cannot reach)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.conftest import LiveServer, create_key, free_port

MARKER_DOC = "zqxdocmarker7f3a"
MARKER_QUERY = "zqxquerymarker9b1c"
THREAD = "zqxthreadmarker55"
STAGES = {"embed", "lexical", "vector", "fuse", "select", "reserve", "rows"}


class Collector:
    """An OTLP/HTTP trace receiver: keeps each export's raw body and answers 200."""

    def __init__(self):
        bodies = self.bodies = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def spans(self) -> list:
        found = []
        for body in self.bodies:
            request = ExportTraceServiceRequest.FromString(body)
            found += [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
        return found

    def close(self):
        self.server.shutdown()


@pytest.fixture
def collector():
    c = Collector()
    yield c
    c.close()


def serve(tmp_path, tracing: dict):
    from services.api.app import create_app
    from services.bootstrap import build_memory
    from services.settings import Settings

    settings = Settings(data_dir=tmp_path / "data", indexer_poll_s=0.05, tracing=tracing,
                        auth={"enabled": True, "rate_limit": "", "failed_auth_limit": ""})
    memory, lock = build_memory(settings)
    token = create_key(settings.data_dir, tenant="acme", principal="ana")  # before the app, which would make one
    server = LiveServer(create_app(settings, memory, on_close=lambda: (memory.close(), lock.release())),
                        free_port(), token)
    return settings, server


@pytest.fixture
def traced(tmp_path, collector):
    from services.bootstrap import tracer_provider_for

    settings, server = serve(tmp_path, {"enabled": True, "otlp_endpoint": collector.url, "service_name": "orgmem-test"})
    provider = tracer_provider_for(settings.tracing)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with server:
        yield server, exporter, provider


def every_string(span) -> list[str]:
    """Everything a span says in words: its name, status, attribute values, events and links."""
    found = [span.name, span.status.description or ""]
    for attributes in [span.attributes, *(e.attributes for e in span.events), *(link.attributes for link in span.links)]:
        for key, value in (attributes or {}).items():
            found += [key, *(map(str, value) if isinstance(value, tuple | list) else [str(value)])]
    found += [e.name for e in span.events]
    return found


def ingest_and_query(server):
    docs = [{"text": f"The travel budget {MARKER_DOC} was raised to 900 euros by the board.", "author": "ana",
             "date": "2025-03-01", "thread": THREAD},
            {"text": "Lunch is served at noon on Fridays.", "author": "ben", "date": "2025-03-02"}]
    written = server.client.post("/v1/documents", json={"documents": docs})
    assert written.status_code == 200, written.text
    answer = server.client.post("/v1/query", json={"q": f"travel budget {MARKER_QUERY} {MARKER_DOC}", "k": 5, "conjunctive": False,
                                                   "after": written.json()["position"]})
    assert answer.status_code == 200, answer.text
    assert any(MARKER_DOC in row["text"] for row in answer.json()["rows"])  # the text was there to leak
    return answer.json()


def test_a_query_over_http_is_a_request_span_over_its_stage_spans(traced):
    server, exporter, provider = traced
    ingest_and_query(server)
    provider.force_flush()
    spans = exporter.get_finished_spans()
    requests = [s for s in spans if s.name == "POST /v1/query"]
    assert len(requests) == 1
    request = requests[0]
    assert request.attributes["http.route"] == "/v1/query"
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["orgmem.tenant"] == "acme"
    queries = [s for s in spans if s.name == "orgmem.query"]
    assert len(queries) == 1 and queries[0].parent.span_id == request.context.span_id
    query = queries[0]
    assert query.context.trace_id == request.context.trace_id
    assert query.attributes["orgmem.tenant"] == "acme" and query.attributes["orgmem.k"] == 5
    assert query.attributes["orgmem.returned"] >= 1 and query.attributes["orgmem.query.chars"] > 0
    stages = {s.name.removeprefix("orgmem.query."): s for s in spans if s.parent is not None
              and s.parent.span_id == query.context.span_id}
    assert STAGES <= set(stages)
    assert all(s.attributes["orgmem.tenant"] == "acme" for s in stages.values())
    assert stages["lexical"].attributes["orgmem.hits.lex"] >= 1
    assert stages["vector"].attributes["orgmem.hits.vec"] >= 1
    assert stages["rows"].attributes["orgmem.rows"] == query.attributes["orgmem.returned"]
    # Each stage lies inside the query's span, and the query's inside the request's.
    for stage in stages.values():
        assert query.start_time <= stage.start_time <= stage.end_time <= query.end_time
    assert request.start_time <= query.start_time <= query.end_time <= request.end_time


def test_projection_batches_have_spans(traced):
    server, exporter, provider = traced
    answer = ingest_and_query(server)
    provider.force_flush()
    batches = [s for s in exporter.get_finished_spans() if s.name == "orgmem.projection.batch"]
    assert batches, "the indexer applied the documents without a span"
    assert sum(s.attributes["orgmem.rows_added"] for s in batches) == 2
    last = max(s.attributes["orgmem.position.last"] for s in batches)
    assert last <= answer["applied_position"]
    assert all(s.attributes["orgmem.position.first"] <= s.attributes["orgmem.position.last"] for s in batches)
    assert any("acme" in s.attributes["orgmem.tenants"] for s in batches)
    assert all(s.parent is None for s in batches)  # the indexer's own traces, not a request's


def test_no_span_carries_document_or_query_text(traced, collector):
    server, exporter, provider = traced
    ingest_and_query(server)
    row_id = server.client.post("/v1/query", json={"q": MARKER_DOC}).json()["rows"][0]["row_id"]
    assert server.client.get(f"/v1/threads/{THREAD}").status_code == 200
    assert server.client.get(f"/v1/rows/{row_id}").status_code == 200
    too_long = server.client.post("/v1/query", json={"q": MARKER_QUERY * 400})  # a 422 names the field only
    assert too_long.status_code == 422
    provider.force_flush()
    spans = exporter.get_finished_spans()
    assert {"GET /v1/threads/{thread_id:path}", "GET /v1/rows/{row_id}", "orgmem.projection.batch"} <= {s.name for s in spans}
    for span in spans:
        for text in every_string(span):
            assert MARKER_DOC not in text and MARKER_QUERY not in text and THREAD not in text, (span.name, text)
    # What left the process over OTLP: the same spans, and not one byte of the markers.
    exported = collector.spans()
    assert {s.name for s in exported} >= {"POST /v1/query", "orgmem.query", "orgmem.query.embed"}
    for body in collector.bodies:
        for marker in (MARKER_DOC, MARKER_QUERY, THREAD):
            assert marker.encode() not in body


def test_a_callers_traceparent_is_continued(traced):
    server, exporter, provider = traced
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    response = server.client.get("/v1/stats", headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"})
    assert response.status_code == 200
    provider.force_flush()
    stats = [s for s in exporter.get_finished_spans() if s.name == "GET /v1/stats"]
    assert len(stats) == 1 and format(stats[0].context.trace_id, "032x") == trace_id
    assert stats[0].attributes["orgmem.tenant"] == "acme"


def test_a_refused_request_has_its_status_and_no_tenant(traced):
    server, exporter, provider = traced
    assert server.client.post("/v1/query", json={"q": "x"}, headers={"Authorization": "Bearer om_bad"}).status_code == 401
    provider.force_flush()
    refused = [s for s in exporter.get_finished_spans() if s.name == "POST /v1/query"]
    assert len(refused) == 1 and refused[0].attributes["http.response.status_code"] == 401
    assert "orgmem.tenant" not in refused[0].attributes


def test_tracing_off_traces_nothing(tmp_path, collector):
    from services.bootstrap import tracer_for, tracer_provider_for

    providers = tracer_provider_for.cache_info().currsize
    settings, server = serve(tmp_path, {"enabled": False, "otlp_endpoint": collector.url})
    assert tracer_for(settings) is None
    with server:
        ingest_and_query(server)
        app = server.server.config.app
        assert all(m.cls.__name__ != "RequestSpans" for m in app.user_middleware)
        assert app.state.orgmem.memory._retriever.tracer is None
        assert app.state.orgmem.memory.projection.tracer is None
    time.sleep(0.5)
    assert collector.bodies == [] and tracer_provider_for.cache_info().currsize == providers


def test_tracing_off_imports_no_sdk():
    """The server's modules and the composition root load without OpenTelemetry's SDK or exporter."""
    code = ("import sys, services.api.app, services.bootstrap as b; from services.settings import Settings; "
            "assert b.tracer_for(Settings()) is None; "
            "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
