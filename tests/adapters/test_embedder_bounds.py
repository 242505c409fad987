"""The encoder's memory does not grow with the size of a text (issue 16, finding 10).

The review ingested 31 documents of ~1M characters and the server went from 0.98 to 4.1 GiB for
good: the tokenizer split each whole text before truncating it to 256 pieces. Texts are now cut
before tokenizing, to a prefix that is checked to give the same pieces, so a normal text's vector
is unchanged and a huge one costs what its first few thousand characters cost."""

from __future__ import annotations

import random
import re
import time

import numpy as np
import pytest

pytestmark = pytest.mark.slow

WORDS = ["budget", "approval", "sensor", "vendor", "contract", "meeting", "quarterly", "review",
         "launch", "deadline", "Ünïcödé", "résumé", "東京", "🚀", "don't", "$5,000.00", "a.b.c"]


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        return int(re.search(r"VmRSS:\s+(\d+)", status.read()).group(1)) / 1024


def words(count: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(count))


@pytest.fixture(scope="module")
def onnx():
    from services.adapters.embedder.onnx_runtime import OnnxEmbedder

    return OnnxEmbedder("all-MiniLM-L6-v2")


def unclipped(embedder, monkeypatch):
    """The same encoder with clipping off (every text is shorter than the budget)."""
    monkeypatch.setattr(embedder._clipper, "budget", 10**12)
    monkeypatch.setattr(embedder._clipper, "hard_limit", 10**12)


def tricky_texts(rng: random.Random) -> list[str]:
    """Texts whose first 256 pieces a naive character cut would change: leading whitespace,
    control characters the normaliser drops, words longer than a word piece allows, CJK, runs with
    no space at all, accents that combine."""
    parts = ["budget", "appro-val", "sensör", "東京", "🚀", "x" * 150, "a.b.c", "\x01", "  ", "\n\n",
             "résumé", "e\u0301", "don't", "$5,000.00", "\x01\x02\x03"]
    out = []
    for _ in range(150):
        count = rng.choice([300, 1500, 6000, 20000])
        text = "".join(rng.choice(parts) + rng.choice([" ", "", "\t", "  \n"]) for _ in range(count))
        if rng.random() < 0.25:
            text = rng.choice([" ", "\x01 ", "\n"]) * rng.randint(1000, 30000) + text
        out.append(text)
    return out


def test_the_cut_never_changes_the_pieces_the_encoder_keeps(onnx):
    tokenizer = onnx._tokenizer  # truncates to 256 pieces, as the encoder sees them
    rng = random.Random(7)
    cut = 0
    for text in tricky_texts(rng):
        clipped = onnx._clipper.clip(text)
        assert text.startswith(clipped)
        cut += len(clipped) < len(text)
        assert tokenizer.encode(clipped).ids == tokenizer.encode(text).ids, (len(text), len(clipped))
    assert cut > 50  # the cut did happen, on most of them


def test_a_long_text_gives_the_identical_vector_clipped_or_not(onnx, monkeypatch):
    long_text = words(3000)  # ~25,000 characters, cut to a few thousand
    short_text = words(300)  # under the budget: untouched
    assert len(onnx._clipper.clip(long_text)) < len(long_text) // 3
    assert onnx._clipper.clip(short_text) == short_text
    texts = [long_text, short_text, "ok"]
    clipped_single = np.vstack([onnx.encode([t]) for t in texts])
    clipped_batch = onnx.encode(texts)
    unclipped(onnx, monkeypatch)
    np.testing.assert_array_equal(clipped_single, np.vstack([onnx.encode([t]) for t in texts]))
    np.testing.assert_allclose(clipped_batch, onnx.encode(texts), atol=1e-6)


def test_pathological_texts_are_cut_at_the_hard_limit(onnx):
    clipper = onnx._clipper
    for text in ("x" * 1_000_000, " " * 999_000 + words(500), "\x01 " * 500_000, "東" * 1_000_000):
        started = time.perf_counter()
        clipped = clipper.clip(text)
        assert len(clipped) <= clipper.hard_limit and text.startswith(clipped)
        assert time.perf_counter() - started < 2.0
        onnx.encode([text])  # and encodes


def test_thirty_one_million_character_texts_encode_in_bounded_memory(onnx):
    """The review's attack: 31 documents of ~1M characters. Before the cut the tokenizer state of
    one batch alone was ~0.5 GB and stayed; now the growth is what the encoder's own buffers cost
    for 31 texts of 256 pieces, which the warm-up below has already paid."""
    base_text = words(150_000)[:1_000_000]
    normal = [base_text[i * 4096:(i + 1) * 4096] for i in range(31)]
    for _ in range(3):  # the encoder's activation buffers for a full batch of 256-piece texts
        onnx.encode(normal)
    huge = [base_text[i:] + base_text[:i] for i in range(31)]  # 31 distinct 1M-character texts
    before = rss_mb()
    started = time.perf_counter()
    for _ in range(2):
        vectors = onnx.encode(huge)
    grown, seconds = rss_mb() - before, time.perf_counter() - started
    assert vectors.shape == (31, onnx.dim)
    assert grown < 200, f"RSS grew {grown:.0f} MB encoding 31 texts of 1M characters twice"
    print(f"31 x 1M characters, twice: RSS +{grown:.0f} MB, {seconds:.1f} s")


@pytest.mark.torch
def test_the_sentence_transformers_backend_cuts_the_same_way(monkeypatch):
    pytest.importorskip("torch", reason="the torch backend: pip install 'orgmem[torch]'")
    from services.adapters.embedder.sentence_transformers import (
        SentenceTransformerEmbedder,
    )

    st = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    text = words(3000, seed=3)
    assert len(st._clipper.clip(text)) < len(text) // 3
    clipped = st.encode([text])
    reference = st._model.encode([text], normalize_embeddings=True, convert_to_numpy=True)
    np.testing.assert_allclose(clipped, reference, atol=1e-6)
