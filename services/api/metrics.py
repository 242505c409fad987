"""Prometheus metrics of the API and the indexer."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("orgmem_http_requests", "HTTP requests", ["route", "status"], registry=self.registry)
        self.latency = Histogram(
            "orgmem_http_request_seconds", "HTTP request latency", ["route"], registry=self.registry,
            buckets=(0.002, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12),
        )
        self.documents = Counter("orgmem_documents_ingested", "Documents appended to the log", registry=self.registry)
        self.log_head = Gauge("orgmem_log_head_position", "Last log position", registry=self.registry)
        self.applied = Gauge("orgmem_indexer_applied_position", "Last position applied to the projections", registry=self.registry)
        self.indexer_errors = Gauge("orgmem_indexer_errors", "Indexer batches that failed and were retried", registry=self.registry)
        self.rows = Gauge("orgmem_rows", "Rows by state", ["state"], registry=self.registry)
