"""One typed Settings object (environment prefix ORGMEM_, nested with __), built once at start."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class RetrievalSettings(BaseModel):
    preset: str = "paper-orgmembench"
    weight_lex: float | None = None
    weight_tag: float | None = None
    weight_vec: float | None = None
    candidates: int | None = None
    k: int | None = None
    conjunctive: bool | None = None
    selector: Literal["rrf", "pursuit"] | None = None


class EmbedderSettings(BaseModel):
    model: str = "all-MiniLM-L6-v2"
    max_tokens: int = 256
    batch_size: int = 64
    threads: int = 1  # torch intra-op threads per process; see the embedder adapter for why 1


class LimitSettings(BaseModel):
    max_body_bytes: int = 32 * 1024 * 1024
    max_batch_documents: int = 1000
    max_k: int = 200
    max_candidates: int = 1000
    read_your_writes_timeout_s: float = 30.0


class ClusterSettings(BaseModel):
    kafka_bootstrap: str | None = None
    kafka_topic: str = "orgmem-events"
    es_url: str | None = None
    es_index: str = "orgmem-rows"
    qdrant_url: str | None = None
    qdrant_collection: str = "orgmem-rows"
    redis_url: str = "redis://127.0.0.1:6379/0"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ORGMEM_", env_nested_delimiter="__", extra="ignore")

    profile: Literal["embedded", "cluster"] = "embedded"
    data_dir: Path = Path("./orgmem-data")
    host: str = "127.0.0.1"
    port: int = 8080
    log_level: str = "INFO"
    indexer_batch: int = 256
    indexer_poll_s: float = 0.2
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    embedder: EmbedderSettings = Field(default_factory=EmbedderSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    cluster: ClusterSettings = Field(default_factory=ClusterSettings)
    # Folders whose files the connector API may read (default: <data_dir>/inbox).
    connector_roots: list[Path] = Field(default_factory=list)
    judge_base_url: str | None = None
    judge_model: str | None = None
    judge_api_key: SecretStr | None = None
