"""The content-addressed vector cache: each distinct (model, text) is encoded once, across
batches, processes and rebuilds; another model never reads this model's vectors."""

from __future__ import annotations

import numpy as np

from services.adapters.vector_cache.sqlite import SqliteVectorCache
from services.app.vector_cache import CachedEmbedder, cache_key


class CountingEncoder:
    name, dim = "counting", 8

    def __init__(self):
        self.encoded: list[str] = []

    def encode(self, texts):
        self.encoded += list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i, len(text) % self.dim] = 1.0
            out[i, (len(text) * 7 + 1) % self.dim] += 0.5
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def cached(tmp_path, model="m1"):
    encoder = CountingEncoder()
    return CachedEmbedder(encoder, SqliteVectorCache(tmp_path / "vectors.sqlite", encoder.dim), model), encoder


def test_each_distinct_text_is_encoded_once_and_vectors_are_unchanged(tmp_path):
    embedder, encoder = cached(tmp_path)
    texts = ["alpha", "beta", "alpha", "gamma gamma"]
    first = embedder.encode(texts)
    assert encoder.encoded == ["alpha", "beta", "gamma gamma"]  # the repeat inside a batch too
    assert np.allclose(first, CountingEncoder().encode(texts))
    second = embedder.encode(["gamma gamma", "delta", "beta"])
    assert encoder.encoded[3:] == ["delta"]
    assert np.allclose(second, CountingEncoder().encode(["gamma gamma", "delta", "beta"]))
    assert (embedder.hits, embedder.misses) == (3, 4)


def test_the_cache_survives_a_new_process_and_is_keyed_by_model(tmp_path):
    embedder, _ = cached(tmp_path)
    embedder.encode(["alpha", "beta"])
    embedder.close()
    again, encoder = cached(tmp_path)
    again.encode(["alpha", "beta"])
    assert encoder.encoded == []
    again.close()
    other_model, encoder = cached(tmp_path, model="m2")
    other_model.encode(["alpha"])
    assert encoder.encoded == ["alpha"]
    other_model.close()


def test_forget_drops_the_vectors_of_a_text(tmp_path):
    embedder, encoder = cached(tmp_path)
    embedder.encode(["secret plan", "public note"])
    assert embedder.forget(["secret plan"]) == 1
    assert embedder.forget(["secret plan"]) == 0
    embedder.encode(["secret plan", "public note"])
    assert encoder.encoded == ["secret plan", "public note", "secret plan"]


def test_a_vector_of_another_dimension_is_not_served(tmp_path):
    cache = SqliteVectorCache(tmp_path / "vectors.sqlite", 8)
    key = cache_key("m1", "alpha")
    cache.put_many([(key, np.ones(4, dtype=np.float32))])
    assert cache.get_many([key]) == {}
    cache.close()


def test_empty_input(tmp_path):
    embedder, encoder = cached(tmp_path)
    assert embedder.encode([]).shape == (0, 8)
    assert encoder.encoded == []
