"""Document and query vectors from any OpenAI-compatible `/v1/embeddings` endpoint
(text-embeddings-inference, vLLM, Ollama, llama.cpp server, a hosted API): the way past one
local encoder when ingest is bound by encoding.

At start one probe text is embedded: the endpoint must answer for the configured model with
vectors of the configured dimension (when one is set), so a wrong model or URL fails at
start, not on the first batch of the indexer. Texts go in batches of `batch_size`, up to
`concurrency` requests in flight; a 429 or 5xx is retried with exponential backoff (honouring
Retry-After), as are timeouts and transport errors; what still fails is BackendUnavailable
naming the embedder, so the indexer pauses and retries the batch instead of losing it. Each
text is cut to `max_chars` first (the endpoint truncates to its own token limit; the cut only
bounds what is sent). Vectors are scaled to unit norm, which the vector index assumes. The API
key goes only into the Authorization header: never into logs, messages or reprs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np

from services.adapters.http_retry import RetriesExhausted, post_with_retries
from services.errors import BackendUnavailable, OrgmemError

log = logging.getLogger(__name__)

COMPONENT = "embedder (OpenAI-compatible endpoint)"
PROBE = "orgmem embedding probe"


class OpenAICompatEmbedder:
    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, dim: int | None = None,
                 batch_size: int = 64, concurrency: int = 4, timeout_s: float = 30.0, max_retries: int = 4,
                 backoff_s: float = 0.5, max_chars: int = 16_384, transport: httpx.BaseTransport | None = None):
        if not base_url:
            raise OrgmemError("embedder.endpoint_url: required for the 'openai' backend")
        self.base_url = base_url.rstrip("/")
        if not self.base_url.endswith("/v1"):
            self.base_url += "/v1"
        self.name, self.model = model, model
        self.batch_size, self.max_chars = max(1, batch_size), max(1, max_chars)
        self.timeout_s, self.max_retries, self.backoff_s = timeout_s, max(0, max_retries), backoff_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(headers=headers, timeout=timeout_s, transport=transport,
                                    limits=httpx.Limits(max_connections=max(1, concurrency)))
        self._pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="embed-remote")
        self.dim = 0  # unknown until the probe answers; then every answer must match it
        probed = self._embed_batch([PROBE])
        if dim and probed.shape[1] != dim:
            self.close()
            raise OrgmemError(f"embedder.dim: {self.base_url} answers {probed.shape[1]}-dimensional vectors for "
                              f"model {model!r}, not the configured {dim}")
        self.dim = int(probed.shape[1])
        log.info("embedder %s behind %s (dim %d)", model, self.base_url, self.dim)

    def __repr__(self) -> str:
        return f"OpenAICompatEmbedder({self.base_url!r}, {self.model!r}, dim={self.dim})"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        batches = [list(texts[i:i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        if len(batches) == 1:
            return self._embed_batch(batches[0])
        return np.concatenate(list(self._pool.map(self._embed_batch, batches)))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    # -- one request ------------------------------------------------------------------------

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        body = {"model": self.model, "input": [text[:self.max_chars] or " " for text in texts],
                "encoding_format": "float"}
        answer = self._post(body)
        vectors = self._vectors(answer, len(texts))
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        if not np.all(norms > 0):
            raise BackendUnavailable(COMPONENT, f"{self.base_url} answered a zero vector")
        return (vectors / norms).astype(np.float32)

    def _vectors(self, answer: object, expected: int) -> np.ndarray:
        """The answer's vectors in input order, checked for count, shape and finite values."""
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list) or len(data) != expected:
            raise BackendUnavailable(COMPONENT, f"{self.base_url} answered {len(data) if isinstance(data, list) else 'no'} "
                                                f"embeddings for {expected} texts")
        try:
            ordered = sorted(data, key=lambda item: int(item["index"]))
            if [int(item["index"]) for item in ordered] != list(range(expected)):
                raise ValueError("indexes are not 0..n-1")
            vectors = np.array([item["embedding"] for item in ordered], dtype=np.float32)
        except (KeyError, TypeError, ValueError) as exc:
            raise BackendUnavailable(COMPONENT, f"{self.base_url} answered malformed embeddings: {exc}") from exc
        if vectors.ndim != 2 or (self.dim and vectors.shape[1] != self.dim) or not np.isfinite(vectors).all():
            raise BackendUnavailable(COMPONENT, f"{self.base_url} answered embeddings of shape {vectors.shape}, "
                                                f"expected ({expected}, {self.dim or 'any'}) finite values")
        return vectors

    def _post(self, body: dict) -> object:
        url = f"{self.base_url}/embeddings"
        try:
            response = post_with_retries(self._client, url, body, max_retries=self.max_retries, backoff_s=self.backoff_s,
                                         timeout_s=self.timeout_s, label=f"embedder {self.base_url}")
        except RetriesExhausted as exc:
            raise BackendUnavailable(COMPONENT, f"{url}: {exc}") from None
        if response.status_code != 200:
            # The request itself is wrong (model unknown, bad key): retrying cannot help.
            raise OrgmemError(f"embedder: {url} answered HTTP {response.status_code} for model {self.model!r}: "
                              f"{response.text[:300]}")
        try:
            return response.json()
        except ValueError as exc:
            raise BackendUnavailable(COMPONENT, f"{url} answered a body that is not JSON") from exc
