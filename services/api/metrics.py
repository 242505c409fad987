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
        self.log_behind = Gauge("orgmem_log_behind_projections",
                                "1 while the log's head is behind the projections' checkpoint (the log lost events)",
                                registry=self.registry)
        self.indexer_errors = Gauge("orgmem_indexer_errors", "Indexer batches that failed and were retried", registry=self.registry)
        self.rows = Gauge("orgmem_rows", "Rows by state", ["state"], registry=self.registry)
        self.indexer_paused = Gauge("orgmem_indexer_paused", "1 while the indexer waits for free space", registry=self.registry)
        self.free_bytes = Gauge("orgmem_storage_free_bytes", "Bytes free on the data folder's file system",
                                registry=self.registry)
        self.min_free_bytes = Gauge("orgmem_storage_min_free_bytes", "Free-space floor under which writes are refused",
                                    registry=self.registry)
        # The embedded vector index's graph, built live in a child process (qdrant_edge_tiers.py).
        self.vector_rows_in_graph = Gauge("orgmem_vector_rows_in_graph", "Vector rows searched through the graph",
                                          registry=self.registry)
        self.vector_rows_exact = Gauge("orgmem_vector_rows_searched_exactly",
                                       "Vector rows searched exactly (added since the last graph build)",
                                       registry=self.registry)
        self.vector_sealed_shards = Gauge("orgmem_vector_sealed_shards",
                                          "Graph shards, each opened and searched by a host process of its own",
                                          registry=self.registry)
        self.vector_hosts_rss = Gauge("orgmem_vector_shard_hosts_resident_bytes",
                                      "Resident memory of the graph shards' host processes (beside the server's own)",
                                      registry=self.registry)
        self.vector_builds_running = Gauge("orgmem_vector_builds_running", "Graph builds in progress",
                                           registry=self.registry)
        self.vector_builds = Gauge("orgmem_vector_builds", "Graph builds since the server started, by outcome",
                                   ["outcome"], registry=self.registry)
        self.vector_last_build_end = Gauge("orgmem_vector_last_build_timestamp_seconds",
                                           "When the last graph build finished (unix time)", registry=self.registry)
        self.vector_last_build_seconds = Gauge("orgmem_vector_last_build_duration_seconds",
                                               "How long the last graph build took", registry=self.registry)

    def vector_graph(self, status: dict) -> None:
        self.vector_rows_in_graph.set(status["rows_in_graph"])
        self.vector_rows_exact.set(status["rows_searched_exactly"])
        self.vector_builds_running.set(status["builds_running"])
        self.vector_sealed_shards.set(status.get("sealed_shards", 0))
        self.vector_hosts_rss.set(status.get("shard_hosts_rss_bytes", 0))
        for outcome in ("done", "failed", "cancelled", "deferred"):
            self.vector_builds.labels(outcome).set(status[f"builds_{outcome}"])
        if status["last_build_finished_at"] is not None:
            self.vector_last_build_end.set(status["last_build_finished_at"])
            self.vector_last_build_seconds.set(status["last_build_seconds"])
