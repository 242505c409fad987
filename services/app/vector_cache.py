"""Document encoding through the content-addressed vector cache.

An embedding is a pure function of the model and the text it is given, so it is stored under a
key of both: `orgmem rebuild`, a re-index and a repeated text then read the vector instead of
encoding it again (a rebuild costs I/O, not encoder time). Only document vectors go through it;
queries are encoded fresh (and at another precision)."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence

import numpy as np

from services.ports import Embedder, VectorCache


def cache_key(model: str, text: str) -> bytes:
    return hashlib.sha256(model.encode("utf-8") + b"\0" + text.encode("utf-8")).digest()


class CachedEmbedder:
    """An Embedder that encodes only the texts the cache lacks (each distinct text once)."""

    def __init__(self, embedder: Embedder, cache: VectorCache, model: str, owns_embedder: bool = False):
        self._embedder, self._cache, self.model = embedder, cache, model
        self._owns_embedder = owns_embedder  # a pool of encoder processes is the memory's own
        self.name, self.dim = embedder.name, embedder.dim
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def keys(self, texts: Sequence[str]) -> list[bytes]:
        return [cache_key(self.model, text) for text in texts]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        keys = self.keys(texts)
        found = self._cache.get_many(list(dict.fromkeys(keys)))
        missing = {key: text for key, text in zip(keys, texts, strict=True) if key not in found}
        if missing:
            encoded = self._embedder.encode(list(missing.values()))
            fresh = list(zip(missing, encoded, strict=True))
            self._cache.put_many(fresh)
            found.update(fresh)
        with self._lock:
            self.misses += len(missing)
            self.hits += len(texts) - len(missing)
        return np.stack([found[key] for key in keys]).astype(np.float32, copy=False)

    def close(self) -> None:
        self._cache.close()  # the process's own encoder is shared by the process (services/bootstrap)
        if self._owns_embedder:
            self._embedder.close()

    def forget(self, texts: Sequence[str]) -> int:
        """Drop the vectors of these texts (erasure: a vector is derived from its text)."""
        return self._cache.forget(self.keys(texts))
