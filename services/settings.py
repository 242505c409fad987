"""One typed Settings object (environment prefix ORGMEM_, nested with __), built once at start."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class RetrievalSettings(BaseModel):
    preset: str = "default"  # services.core.retrieval_config.DEFAULT_PRESET; "paper-orgmembench" is Mem++'s
    weight_lex: float | None = None
    weight_tag: float | None = None
    weight_vec: float | None = None
    candidates: int | None = None
    k: int | None = None
    conjunctive: bool | None = None  # an alias: True is lexical_match "all", False "any"
    lexical_match: Literal["all", "any", "adaptive"] | None = None
    lexical_turn_match: Literal["all", "any", "adaptive"] | None = None  # how chat turns match (the preset's)
    selector: Literal["rrf", "pursuit", "coverage"] | None = None


class EmbedderSettings(BaseModel):
    model_config = ConfigDict(frozen=True)  # hashable: the composition root caches one encoder per setting

    model: str = "all-MiniLM-L6-v2"
    max_tokens: int = 256
    # Texts per encoder call. 16, not 64: on 600 mixed LoCoMo and QMSum turns (warm, 1 thread) 16
    # encoded 53-58 documents/s against 25-27, on short turns 133-142 against 77-78, and an
    # encoder's peak RSS at 128 long texts is 0.44 GB against 1.2 GB. (A remote endpoint may want
    # larger requests: the openai backend sends this many texts per request.)
    batch_size: int = Field(default=16, ge=1, le=1024)
    threads: int = 1  # intra-op threads per encoder; see the sentence-transformers adapter for why 1
    # "onnx" runs the same model through onnxruntime (3x faster per query, same vectors);
    # "torch" runs it through sentence-transformers directly; "openai" calls an OpenAI-compatible
    # /v1/embeddings endpoint (text-embeddings-inference, vLLM, Ollama, llama.cpp) for `model`.
    backend: Literal["onnx", "torch", "openai"] = "onnx"
    endpoint_url: str | None = None  # backend "openai": e.g. http://127.0.0.1:8081/v1
    api_key: SecretStr | None = None
    dim: int | None = Field(default=None, ge=1)  # backend "openai": checked against the endpoint at start
    concurrency: int = Field(default=4, ge=1, le=64)  # backend "openai": requests in flight
    timeout_s: float = Field(default=30.0, gt=0)
    # Where the ONNX export of a model is kept (default ~/.cache/orgmem/onnx).
    cache_dir: Path | None = None
    # Queries through the onnx backend: "int8" halves the query encode (3.7 ms against 7.7 ms) at
    # cosine 0.994 to fp32 (documents: `document_precision`). The torch backend is fp32 only.
    query_precision: Literal["fp32", "int8"] = "int8"
    # Documents through the onnx backend. int8 (one text at a time) encodes 2.6x the documents per
    # CPU-second of fp32 at cosine 0.986 (0.947 at worst) to their fp32 vectors; held-out recall@10
    # stayed within 0.4 points (LoCoMo, synthetic organisation), but the organisation's complete@10
    # fell 1.4 points under the default selector, so documents stay fp32 unless asked.
    document_precision: Literal["fp32", "int8"] = "fp32"
    # Document vectors kept by (model, text) in the data folder's cache/vectors.sqlite (embedded
    # profile), so a rebuild or a repeated text never encodes again; about 2.1 KB per distinct text (384 dimensions).
    vector_cache: bool = True
    # Encoder processes for the embedded indexer's document batches (the live trickle, a backlog, a
    # rebuild); queries keep the in-process encoder. None = one per core, at most 4; 1 = encode in process.
    encoder_processes: int | None = Field(default=None, ge=1, le=64)
    # How those processes yield to the server's threads. "idle" (Linux SCHED_IDLE; nice elsewhere):
    # a waking query thread preempts them at once. In the live benchmark at 20 documents/s (four
    # pairs of 5-minute runs, alternating) query p50 was 0.7-2.7 ms lower than with "low" (nice 10)
    # in every pair, and the longest ingest lag 13-33 s against 8-14 s: while queries keep both
    # cores busy the workers get almost nothing, so a backlog waits in the log. "low" shares more evenly.
    encoder_priority: Literal["idle", "low"] = "idle"
    # Batches of fewer texts than this are encoded in the process itself, at normal priority. 1: every
    # batch goes to the processes above. In the live benchmark at 20 documents/s the projector's
    # batches are 10-20 documents; encoded in the server (the default was 32) they kept 1.7 cores
    # busy in it and query p50 read 2.7-4.1 ms over the same run's no-ingest figure, against
    # -0.1 to 2.2 ms with every batch in the SCHED_IDLE workers (docs/live-at-scale.md).
    encoder_pool_min_batch: int = Field(default=1, ge=1)

    @property
    def query_vectors(self) -> str:
        """The precision queries are actually encoded at (the torch backend has only fp32)."""
        return self.query_precision if self.backend == "onnx" else "fp32"

    @property
    def document_vectors(self) -> str:
        """The precision documents are actually encoded at."""
        return self.document_precision if self.backend == "onnx" else "fp32"


class LimitSettings(BaseModel):
    max_body_bytes: int = 32 * 1024 * 1024
    max_batch_documents: int = 1000
    max_k: int = 200
    max_candidates: int = 1000
    max_filter_values: int = 100  # entries in each of kinds / authors / threads of a query
    max_thread_rows: int = Field(default=500, ge=1)  # rows one thread answer holds: its latest ones
    read_your_writes_timeout_s: float = 30.0
    # Requests of one caller (API key or OIDC subject) being served at once in this process; more
    # answer 429 (0 = no cap). Waits for `after` count too, so one caller cannot hold every connection.
    max_in_flight_per_caller: int = 8
    # Slow clients: a connection has header_timeout_s to send a request's headers (from when it
    # opens or its last response ends, so idle keep-alive connections close after the shorter of
    # this and keep_alive_timeout_s), and a request body_timeout_s to send its whole body (408).
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    keep_alive_timeout_s: int = 5
    max_header_bytes: int = 16 * 1024
    # Open connections and requests in flight, all callers together, before the server answers 503.
    max_connections: int = 1000
    # Free space the data folder's file system must keep: under it, writes answer 507 and the
    # indexer pauses (a full disk would kill the process inside Qdrant Edge's mmap). 0 = off.
    min_free_bytes: int = Field(default=256 * 1024 * 1024, ge=0)


class AuthSettings(BaseModel):
    """Who may call the API. Health and metrics are always open; everything else needs an API key
    or, when an issuer is configured, an OIDC bearer token."""

    enabled: bool = True
    # Where API keys live (only salted hashes): "sqlite" (keys_file, default <data_dir>/keys.sqlite)
    # or "redis" (cluster.redis_url, shared by every API replica; needs AOF). None = sqlite in the
    # embedded profile, redis in the cluster profile.
    key_store: Literal["sqlite", "redis"] | None = None
    keys_file: Path | None = None
    # With auth on and no key at all, `serve` creates one admin key and prints it once (the demo).
    bootstrap_admin_key: bool = True
    oidc_issuer: str | None = None
    oidc_audience: str | None = None
    oidc_jwks_url: str | None = None
    oidc_algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256"])
    oidc_leeway_s: int = 30
    tenant_claim: str = "orgmem_tenant"
    principal_claim: str = "sub"
    groups_claim: str = "groups"
    role_claim: str = "orgmem_role"
    # A token without a role claim gets this role; without a tenant claim, this tenant (None = refuse).
    oidc_default_role: Literal["reader", "writer", "admin"] = "reader"
    oidc_default_tenant: str | None = None
    # Per caller, in the `limits` notation; several windows separated by ";".
    rate_limit: str = "50/second;1500/minute"
    # Per client address, for requests whose credentials fail (slows guessing and hash-cost abuse).
    failed_auth_limit: str = "30/minute"
    # Per presented credential (a key id, or a hash of any other token); None = failed_auth_limit.
    # Only failures count: a credential that verifies is never refused by either failure limit.
    failed_auth_credential_limit: str | None = None
    # Credentials that need a hash or a key-set fetch, from an address or for a key id over its
    # failure limit, are verified this many at a time (the rest wait without holding a thread).
    failed_auth_verify_slots: int = 2
    # Peers (addresses or networks, e.g. "10.0.0.0/8") whose X-Forwarded-For / Forwarded headers
    # name the client. Empty: the headers are ignored and the peer is the client.
    trusted_proxies: list[str] = Field(default_factory=list)
    # "memory://" (one process) or a Redis URL; None = memory embedded, cluster.redis_url in the cluster.
    rate_limit_storage: str | None = None
    # CORS is off unless origins are listed (exact origins; "*" is refused because keys are bearer secrets).
    cors_origins: list[str] = Field(default_factory=list)


class ClusterSettings(BaseModel):
    # Where the rows and their lexical index live. "elasticsearch" (es_url): any number of hosts.
    # "shared-folder": the SQLite row store and a tantivy index in `shared_dir`, which every
    # process of the cluster opens (one host: tests, small installs), with Kafka and the Qdrant
    # server as with Elasticsearch. `orgmem rebuild` needs "elasticsearch" (docs/cluster.md).
    stores: Literal["elasticsearch", "shared-folder"] = "elasticsearch"
    shared_dir: Path | None = None  # stores "shared-folder"; default <data_dir>/shared
    kafka_bootstrap: str | None = None
    kafka_topic: str = "orgmem-events"
    # The log split by tenant into this many partitions (lanes of positions, each with its own
    # checkpoint): indexers share them, and one tenant's bulk import does not hold back another's.
    # Fixed once the topic exists (a tenant's events must stay in one partition).
    kafka_partitions: int = Field(default=1, ge=1, le=64)
    es_url: str | None = None
    es_index: str = "orgmem-rows"
    qdrant_url: str | None = None
    qdrant_collection: str = "orgmem-rows"
    redis_url: str = "redis://127.0.0.1:6379/0"
    kafka_replication_factor: int = 1
    kafka_min_insync_replicas: int | None = None
    # How long one Kafka call may block before the API answers 503 naming the event log.
    kafka_timeout_ms: int = Field(default=10_000, ge=1_000, le=300_000)
    # One appended batch is one Kafka record, so a record must hold a whole request: up to
    # limits.max_body_bytes of documents (32 MiB), sealed (base64: 4/3) and in the event envelope.
    # The topic is created with this max.message.bytes; the brokers' limits must allow it (docs/cluster.md).
    kafka_max_record_bytes: int = Field(default=64 * 1024 * 1024, ge=1024 * 1024, le=1024 * 1024 * 1024)
    es_shards: int = 1
    es_replicas: int = 0
    task_soft_time_limit_s: int = 3300
    task_time_limit_s: int = 3600
    task_visibility_timeout_s: int = 4200
    # A maintenance task whose tenant has a run on another worker waits this long, then tries again.
    tenant_busy_retry_s: float = 30.0


class TracingSettings(BaseModel):
    """OpenTelemetry traces, off by default: a span per HTTP request, per query stage and per
    projection batch, exported over OTLP/HTTP. Spans carry tenants, routes, statuses and sizes,
    never document or query text. Collector headers come from OTEL_EXPORTER_OTLP_HEADERS."""

    model_config = ConfigDict(frozen=True)  # hashable: the composition root keeps one provider per setting

    enabled: bool = False
    otlp_endpoint: str = "http://127.0.0.1:4318/v1/traces"
    service_name: str = "orgmem"
    # Traces kept, from 0 to 1 (a request that arrives with a sampled W3C traceparent is always kept).
    sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0)


class ErasureSettings(BaseModel):
    """Crypto-shredding (docs/erasure.md): documents are stored in the log encrypted under data keys
    kept outside it, so that erasing destroys the keys."""

    # Off only to measure what encryption costs (bench/erasure_cost.py): the log then keeps
    # plaintext and erasure is refused.
    encrypt: bool = True
    # Where data keys live: <data_dir>/data-keys.sqlite (embedded) or Redis (cluster; needs AOF).
    # None = sqlite in the embedded profile, redis in the cluster profile.
    key_store: Literal["sqlite", "redis"] | None = None
    data_keys_file: Path | None = None  # default <data_dir>/data-keys.sqlite
    redis_url: str | None = None  # default cluster.redis_url


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ORGMEM_", env_nested_delimiter="__", extra="ignore")

    profile: Literal["embedded", "cluster"] = "embedded"
    data_dir: Path = Path("./orgmem-data")
    host: str = "127.0.0.1"
    port: int = 8080
    log_level: str = "INFO"
    indexer_batch: int = 256
    indexer_poll_s: float = 0.2
    # /readyz answers 503 "lagging" when the log head is more than this many events (embedded) or
    # appended batches (cluster: Kafka positions leave gaps) ahead of the projections; 0 disables it.
    indexer_max_lag: int = 10_000
    # How many candidates the vector graph search keeps (HNSW ef); None: the engine's default (100).
    # Wider finds more of the exact nearest rows at some cost: at 100k rows 0.933 of the exact
    # top 50 at the default, 0.955 at 128, 0.977 at 200, for +0.25 and +0.8 ms (docs/live-at-scale.md).
    vector_search_ef: int | None = None
    # Embedded profile: rows searched exactly (added since the last graph build) at which the
    # server seals them into the graph in a child process; checked every vector_seal_check_s.
    # Exact search costs about 1 us per row at 384 dimensions (8.6 ms at 10k, 16 ms at 20k, on the
    # shared 2-core host); each build copies the rows it seals (and the sealed shards of their size
    # class, once it is full) and builds a graph of them (10k beside 90k sealed: 8 s in the niced
    # child, 0.17 s of writes held for the copy). bench/live_graph.py.
    vector_seal_rows: int = Field(default=10_000, ge=1)
    vector_seal_check_s: float = Field(default=5.0, gt=0)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    embedder: EmbedderSettings = Field(default_factory=EmbedderSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    cluster: ClusterSettings = Field(default_factory=ClusterSettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)
    erasure: ErasureSettings = Field(default_factory=ErasureSettings)
    # Folders whose files the connector API may read, shared by every tenant without its own entry
    # in connector_tenant_roots (default: <data_dir>/inbox/<tenant>, one inbox per tenant).
    connector_roots: list[Path] = Field(default_factory=list)
    # Per tenant: the only folders its writers' connector runs may read, e.g.
    # ORGMEM_CONNECTOR_TENANT_ROOTS='{"acme": ["/srv/inbox/acme"]}'. The data folder is never readable.
    connector_tenant_roots: dict[str, list[Path]] = Field(default_factory=dict)
    # What a deletion found in a source does to its rows: "erase" (crypto-shredding, as
    # POST /v1/admin/erasures) or "mark" (archived, out of retrieval, readable by id), per source,
    # e.g. ORGMEM_CONNECTOR_DELETIONS='{"slack": "mark"}'. Default: erase for chat, mark otherwise.
    connector_deletions: dict[str, Literal["erase", "mark"]] = Field(default_factory=dict)
    # Where admin maintenance jobs run: "in-process" (a thread of the server) or "celery" (the
    # workers of workers/maintenance, over cluster.redis_url). Default: in-process in the embedded
    # profile, celery in the cluster profile.
    task_runner: Literal["in-process", "celery"] | None = None
    judge_base_url: str | None = None
    judge_model: str | None = None
    judge_api_key: SecretStr | None = None
    # POST /v1/answer, the MCP tool `answer` and `orgmem ask`: an OpenAI-compatible chat endpoint that
    # answers from the retrieved evidence (docs/answer.md). Without base url and model they answer 501.
    answer_base_url: str | None = None
    answer_model: str | None = None
    answer_api_key: SecretStr | None = None
    answer_timeout_s: float = Field(default=60.0, gt=0, le=600)
    # The rendered evidence one answer may send (characters); more is refused (400, asking for a smaller k).
    answer_max_evidence_chars: int = Field(default=200_000, ge=1000)
