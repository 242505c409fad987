"""Spans of the use cases, on an OpenTelemetry tracer that the composition root hands in (None
when tracing is off: callers check that and do nothing else, and OpenTelemetry is not imported).

Spans say who and how much, never what: tenants, counts, positions, sizes and stage times. No
document text, query text, thread name or exception message goes into an attribute, an event or
a status: a failure is recorded as its exception's class name (`error.type`) only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

Stage = tuple[str, float, float]  # a read-path stage: name, start and end in perf_counter seconds


@contextmanager
def span(tracer, name: str, attributes: Mapping[str, object], **options) -> Iterator[object]:
    """A current span around a block; on an exception, ERROR with the class name and no message.
    `options` go to `start_as_current_span` (a parent context, a span kind)."""
    from opentelemetry.trace import Status, StatusCode

    with tracer.start_as_current_span(name, attributes=dict(attributes), record_exception=False,
                                      set_status_on_exception=False, **options) as current:
        try:
            yield current
        except BaseException as exc:
            current.set_attribute("error.type", type(exc).__qualname__)
            current.set_status(Status(StatusCode.ERROR))
            raise


def record_query(tracer, tenant: str, started: float, stages: Sequence[Stage], attributes: Mapping[str, object],
                 stage_attributes: Mapping[str, Mapping[str, object]]) -> None:
    """The spans of one answered query, after the fact: `orgmem.query` over the read path and a
    child per stage at the times the retriever measured (the lexical stages ran on a worker beside
    the embedding, so they overlap it). Recording them afterwards keeps the read path itself free
    of span calls; the parent is the caller's current span (the HTTP request's)."""
    from opentelemetry import trace

    offset = time.time_ns() - time.perf_counter_ns()

    def ns(seconds: float) -> int:
        return offset + int(seconds * 1e9)

    ended = max((end for _, _, end in stages), default=started)
    query = tracer.start_span("orgmem.query", start_time=ns(started),
                              attributes={"orgmem.tenant": tenant, **attributes})
    if not query.is_recording():  # sampled out: its stages would be dropped too, skip their cost
        query.end(end_time=ns(ended))
        return
    context = trace.set_span_in_context(query)
    for name, begin, end in stages:
        stage = tracer.start_span(f"orgmem.query.{name}", context=context, start_time=ns(begin),
                                  attributes={"orgmem.tenant": tenant, **stage_attributes.get(name, {})})
        stage.end(end_time=ns(end))
    query.end(end_time=ns(ended))


def batch_attributes(events: Sequence) -> dict[str, object]:
    """A projection batch's span attributes before it is applied: its size, positions and tenants."""
    return {"orgmem.events": len(events), "orgmem.position.first": events[0].position,
            "orgmem.position.last": events[-1].position,
            "orgmem.tenants": sorted({logged.event.tenant for logged in events})}
