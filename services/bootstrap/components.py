"""Components picked by settings: the encoders (documents behind the vector cache), tracing,
the retrieval presets, the judge, the answers' chat model and the API key store."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import lru_cache, partial
from pathlib import Path

from services.app.vector_cache import CachedEmbedder
from services.bootstrap.data_folder import private_data_folder
from services.core.maintenance import Judge
from services.core.retrieval_config import PRESETS, RetrievalConfig
from services.errors import Invalid
from services.ports import ChatModel, Embedder, KeyStore
from services.settings import EmbedderSettings, Settings, TracingSettings


@lru_cache(maxsize=8)
def _embedder(settings: EmbedderSettings, role: str, load_now: bool | None = None) -> Embedder:
    if settings.backend == "openai":
        from services.adapters.embedder.openai_compat import OpenAICompatEmbedder

        key = settings.api_key.get_secret_value() if settings.api_key else None
        return OpenAICompatEmbedder(settings.endpoint_url or "", settings.model, api_key=key, dim=settings.dim,
                                    batch_size=settings.batch_size, concurrency=settings.concurrency,
                                    timeout_s=settings.timeout_s, max_chars=settings.max_tokens * 64)
    # The document encoder loads its model at its first batch: with encoder processes (every
    # embedded server on 2+ cores) that never comes, and the server's RSS stays ~90 MiB lower
    # (bench.footprint). The query encoder loads now, so that no query pays for it.
    return _local_encoder(settings, role, load_now=role == "query" if load_now is None else load_now)()


def _local_encoder(settings: EmbedderSettings, role: str, load_now: bool = True) -> Callable[[], Embedder]:
    """How to build a local encoder: a picklable callable, so that an encoder process builds the same one."""
    if settings.backend == "onnx":
        from services.adapters.embedder.onnx_runtime import OnnxEmbedder

        return partial(OnnxEmbedder, settings.model, max_tokens=settings.max_tokens, batch_size=settings.batch_size,
                       threads=settings.threads, cache_dir=settings.cache_dir, load_now=load_now,
                       precision=settings.query_vectors if role == "query" else settings.document_vectors)
    from services.adapters.embedder.sentence_transformers import (
        SentenceTransformerEmbedder,
    )

    return partial(SentenceTransformerEmbedder, settings.model, max_tokens=settings.max_tokens,
                   batch_size=settings.batch_size, threads=settings.threads)


def encoder_processes(settings: EmbedderSettings) -> int:
    """How many processes encode document batches: the setting, else one per core up to 4; the
    remote backend is always 1 (the endpoint spreads the work)."""
    if settings.backend == "openai":
        return 1
    if settings.encoder_processes is not None:
        return settings.encoder_processes
    return max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 4))


def pooled(settings: EmbedderSettings, local: Embedder) -> Embedder:
    """The process's own encoder, or a pool of encoder processes in front of it (one pool per
    memory, stopped by its close) when more than one process is configured."""
    processes = encoder_processes(settings)
    if processes < 2:
        return local
    from services.adapters.embedder.process_pool import ProcessPoolEmbedder

    return ProcessPoolEmbedder(local, _local_encoder(settings, "ingest"), processes, priority=settings.encoder_priority,
                               min_batch=settings.encoder_pool_min_batch)


def cached_document_embedder(settings: Settings) -> Embedder:
    """The document encoder of the embedded profile, over encoder processes for a backlog and
    behind the data folder's vector cache."""
    local = embedder_for(settings.embedder)
    if settings.profile != "embedded":
        return local
    embedder = pooled(settings.embedder, local)
    if not settings.embedder.vector_cache:
        return embedder
    from services.adapters.vector_cache.sqlite import SqliteVectorCache

    e = settings.embedder
    cache = SqliteVectorCache(Path(settings.data_dir) / "cache" / "vectors.sqlite", embedder.dim)
    return CachedEmbedder(embedder, cache, model=f"{e.backend}/{e.model}/{e.max_tokens}/{e.document_vectors}",
                          owns_embedder=embedder is not local)


def embedder_for(settings: EmbedderSettings, role: str = "ingest", load_now: bool | None = None) -> Embedder:
    """One encoder per process, model and role. Queries get their own copy of the model (int8 by
    default, see `EmbedderSettings.query_precision`), so that a query never queues behind the
    indexer's batch encode."""
    return _embedder(settings.model_copy(update={"encoder_processes": None}), role, load_now)


@lru_cache(maxsize=4)
def tracer_provider_for(settings: TracingSettings):
    """One OpenTelemetry tracer provider (and export queue) per tracing setting and process."""
    from services.adapters.tracing.otlp import otlp_tracer_provider

    return otlp_tracer_provider(settings)


def tracer_for(settings: Settings):
    """The tracer that the request, query-stage and projection-batch spans go to, or None when
    tracing is off: then nothing checks more than that None, and the SDK is never imported."""
    if not settings.tracing.enabled:
        return None
    return tracer_provider_for(settings.tracing).get_tracer("orgmem")


def retrieval_config(settings: Settings) -> RetrievalConfig:
    r = settings.retrieval
    if r.preset not in PRESETS:
        raise Invalid(f"retrieval.preset: unknown preset {r.preset!r}; known: {', '.join(sorted(PRESETS))}")
    base = PRESETS[r.preset]
    weights = dict(base.weights)
    for leg, value in (("lex", r.weight_lex), ("tag", r.weight_tag), ("vec", r.weight_vec)):
        if value is not None:
            weights[leg] = value
    return base.with_overrides(
        weights=weights, candidates=r.candidates, k=r.k, conjunctive=r.conjunctive, lexical_match=r.lexical_match,
        lexical_turn_match=r.lexical_turn_match, selector=r.selector,
    )


def judge_for(settings: Settings) -> Judge:
    """An OpenAI-compatible judge when `judge_base_url` and `judge_model` are set, else the rule judge."""
    from services.adapters.judge import OpenAICompatJudge, RuleJudge

    if settings.judge_base_url and settings.judge_model:
        return OpenAICompatJudge(settings.judge_base_url, settings.judge_model, settings.judge_api_key)
    if settings.judge_base_url or settings.judge_model:
        raise Invalid("judge_base_url, judge_model: set both to use a model judge, or neither for the rule judge")
    return RuleJudge()


def answer_model_for(settings: Settings) -> ChatModel | None:
    """The answers' chat model when `answer_base_url` and `answer_model` are set; None when neither is
    (POST /v1/answer then answers 501)."""
    if settings.answer_base_url and settings.answer_model:
        from services.adapters.answer import OpenAICompatChat

        return OpenAICompatChat(settings.answer_base_url, settings.answer_model, settings.answer_api_key,
                                timeout_s=settings.answer_timeout_s)
    if settings.answer_base_url or settings.answer_model:
        raise Invalid("answer_base_url, answer_model: set both to answer questions with a model, or neither")
    return None


def key_store_for(settings: Settings) -> KeyStore:
    """The API keys: `<data_dir>/keys.sqlite`, or Redis in the cluster (every replica shares them)."""
    if (settings.auth.key_store or ("redis" if settings.profile == "cluster" else "sqlite")) == "redis":
        from services.adapters.key_store.api_keys_redis import RedisKeyStore

        return RedisKeyStore(settings.cluster.redis_url)
    from services.adapters.key_store.sqlite import SqliteKeyStore

    return SqliteKeyStore(settings.auth.keys_file or private_data_folder(Path(settings.data_dir)) / "keys.sqlite")


