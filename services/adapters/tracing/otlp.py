"""OpenTelemetry's SDK for orgmem's spans: a tracer provider that batches spans and exports them
over OTLP/HTTP (protobuf) to a collector. Imported only when tracing is on."""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from services.settings import TracingSettings

# Seconds one export may take: a collector that hangs must not hold the export thread, or the
# shutdown flush at exit, for long.
EXPORT_TIMEOUT_S = 10


def otlp_tracer_provider(settings: TracingSettings) -> TracerProvider:
    """A provider of its own, not the process-wide global one, so that the spans of two servers
    in one process (tests) never mix. It flushes what is queued when the process exits."""
    provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}),
                              sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otlp_endpoint,
                                                                    timeout=EXPORT_TIMEOUT_S)))
    return provider
