"""services.app.tracing on the OpenTelemetry SDK: query spans placed at the measured times, nothing
recorded for a sampled-out query, and a failure recorded by its class name, never its message."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import StatusCode

from services.app.tracing import record_query, span


def tracer_and_spans(**provider_options):
    provider = TracerProvider(**provider_options)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


def test_stage_spans_sit_at_the_measured_times_under_the_query_span():
    tracer, exporter = tracer_and_spans()
    stages = [("embed", 10.0, 10.004), ("lexical", 10.0005, 10.002), ("vector", 10.004, 10.007)]
    record_query(tracer, "acme", 9.999, stages, {"orgmem.k": 5}, {"vector": {"orgmem.hits.vec": 7}})
    spans = {s.name: s for s in exporter.get_finished_spans()}
    query = spans.pop("orgmem.query")
    assert set(spans) == {"orgmem.query.embed", "orgmem.query.lexical", "orgmem.query.vector"}
    assert query.attributes["orgmem.tenant"] == "acme" and query.attributes["orgmem.k"] == 5
    assert (query.end_time - query.start_time) == pytest.approx(8_000_000, abs=2)
    embed = spans["orgmem.query.embed"]
    assert (embed.start_time - query.start_time) == pytest.approx(1_000_000, abs=2)
    assert (embed.end_time - embed.start_time) == pytest.approx(4_000_000, abs=2)
    assert spans["orgmem.query.vector"].attributes["orgmem.hits.vec"] == 7
    assert all(s.parent.span_id == query.context.span_id and s.attributes["orgmem.tenant"] == "acme"
               for s in spans.values())


def test_a_sampled_out_query_records_nothing():
    tracer, exporter = tracer_and_spans(sampler=ALWAYS_OFF)
    record_query(tracer, "acme", 1.0, [("embed", 1.0, 1.1)], {}, {})
    assert exporter.get_finished_spans() == ()


def test_a_failure_is_its_class_name_only():
    tracer, exporter = tracer_and_spans()
    with pytest.raises(ValueError), span(tracer, "orgmem.projection.batch", {"orgmem.events": 3}):
        raise ValueError("document text: SECRET-7731")
    (failed,) = exporter.get_finished_spans()
    assert failed.status.status_code is StatusCode.ERROR and not failed.status.description
    assert failed.attributes["error.type"] == "ValueError" and failed.events == ()
    assert "SECRET" not in repr(dict(failed.attributes))
