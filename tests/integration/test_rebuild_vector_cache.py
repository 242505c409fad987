"""`orgmem rebuild` reads every document vector from the data folder's vector cache instead of
encoding it again, and the rebuilt store answers exactly as before."""

from __future__ import annotations

import pytest

from services.bootstrap import components
from services.bootstrap import build_memory, rebuild_aside
from tests.integration.test_rebuild import corpus, top_ids

pytestmark = pytest.mark.slow


class Counting:
    """The document encoder, counting the texts it is asked to encode."""

    def __init__(self, embedder, encoded: list[int]):
        self.name, self.dim, self._embedder, self._encoded = embedder.name, embedder.dim, embedder, encoded

    def encode(self, texts):
        self._encoded.append(len(texts))
        return self._embedder.encode(texts)


def filled(settings):
    memory, lock = build_memory(settings)
    try:
        memory.ingest(corpus())
        memory.catch_up()
        return top_ids(memory), memory.counts()
    finally:
        memory.close()
        lock.release()


def rebuild_counting(settings, monkeypatch) -> int:
    # In process, where the counter sees every text (encoder processes would encode the backlog).
    settings = settings.model_copy(update={"embedder": settings.embedder.model_copy(update={"encoder_processes": 1})})
    encoded: list[int] = []
    real = components.embedder_for
    monkeypatch.setattr(components, "embedder_for",
                        lambda s, role="ingest": Counting(real(s, role), encoded) if role == "ingest" else real(s, role))
    rebuild_aside(settings)
    monkeypatch.setattr(components, "embedder_for", real)
    return sum(encoded)


def test_rebuild_encodes_nothing_and_answers_the_same(settings, monkeypatch):
    before, counts = filled(settings)
    assert (settings.data_dir / "cache" / "vectors.sqlite").is_file()
    assert rebuild_counting(settings, monkeypatch) == 0
    memory, lock = build_memory(settings)
    try:
        assert top_ids(memory) == before and memory.counts() == counts
    finally:
        memory.close()
        lock.release()


def test_without_the_cache_a_rebuild_encodes_every_row(settings, monkeypatch):
    settings = settings.model_copy(update={"embedder": settings.embedder.model_copy(update={"vector_cache": False})})
    _, counts = filled(settings)
    assert not (settings.data_dir / "cache" / "vectors.sqlite").exists()
    assert rebuild_counting(settings, monkeypatch) == len(corpus())  # every row encoded again
