"""The two encoder backends give the same vectors for the same model, so an index built by one
answers queries encoded by the other."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from services.errors import OrgmemError

pytestmark = pytest.mark.slow

TEXTS = [
    "When did procurement approve the sensor vendor contract?",
    "ok",
    "Ünïcödé — résumé naïve café, 東京 and emoji 🚀 in one line",
    # Longer than 256 word pieces: both backends must cut it at the same place.
    " ".join(f"calibration step {i} of the rig in building {i % 7}" for i in range(120)),
    "Release plan: the September launch moves to October after the June review.\n\nApproved by Dana.",
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def onnx_embedder(cache_dir):
    from services.adapters.embedder.onnx_runtime import OnnxEmbedder

    return OnnxEmbedder("all-MiniLM-L6-v2", cache_dir=cache_dir)


@pytest.mark.torch
def test_onnx_vectors_equal_sentence_transformers(onnx_embedder):
    pytest.importorskip("torch", reason="the torch backend is the reference: pip install 'orgmem[torch]'")
    from services.adapters.embedder.sentence_transformers import (
        SentenceTransformerEmbedder,
    )

    reference = SentenceTransformerEmbedder("all-MiniLM-L6-v2").encode(TEXTS)
    # Batch encoding mixes lengths (padding) and single encoding has none; both must agree.
    batched = onnx_embedder.encode(TEXTS)
    single = np.vstack([onnx_embedder.encode([t]) for t in TEXTS])
    assert batched.shape == reference.shape == (len(TEXTS), 384)
    assert batched.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)
    assert np.min(np.sum(batched * reference, axis=1)) > 0.9999
    assert np.min(np.sum(single * reference, axis=1)) > 0.9999


def test_int8_query_encoder_stays_close_to_fp32(cache_dir, onnx_embedder):
    from services.adapters.embedder.onnx_runtime import OnnxEmbedder

    int8 = OnnxEmbedder("all-MiniLM-L6-v2", cache_dir=cache_dir, precision="int8")
    quantised = int8.encode(TEXTS)
    # int8 activations are scaled per run: a text's vector must not depend on its batch mates.
    np.testing.assert_array_equal(quantised, np.vstack([int8.encode([t]) for t in TEXTS]))
    exact = onnx_embedder.encode(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(quantised, axis=1), 1.0, atol=1e-5)
    cosines = np.sum(quantised * exact, axis=1)
    # Close (0.994 on average over 200 questions; a two-letter text ~0.97), but not the fp32
    # graph under another name.
    assert cosines.min() > 0.95 and cosines.mean() > 0.98 and cosines.max() < 0.99999
    assert int8.name != onnx_embedder.name


def test_a_lazy_encoder_loads_its_model_at_the_first_encode_and_gives_the_same_vectors(cache_dir, onnx_embedder):
    from services.adapters.embedder.onnx_runtime import OnnxEmbedder

    lazy = OnnxEmbedder("all-MiniLM-L6-v2", cache_dir=cache_dir, load_now=False)
    assert not lazy.loaded and onnx_embedder.loaded
    assert (lazy.name, lazy.dim) == (onnx_embedder.name, onnx_embedder.dim)  # known without the model
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(lazy.encode(TEXTS))) for _ in range(4)]
    for thread in threads:  # first calls from four threads at once: one load, the same vectors
        thread.start()
    for thread in threads:
        thread.join()
    assert lazy.loaded and len(results) == 4
    for vectors in results:
        np.testing.assert_array_equal(vectors, onnx_embedder.encode(TEXTS))


def test_unknown_precision_names_the_setting(cache_dir):
    from services.adapters.embedder.onnx_runtime import OnnxEmbedder

    with pytest.raises(OrgmemError, match="embedder.query_precision"):
        OnnxEmbedder("all-MiniLM-L6-v2", cache_dir=cache_dir, precision="int4")


def test_empty_input_gives_no_rows(onnx_embedder):
    assert onnx_embedder.encode([]).shape == (0, 384)


def test_export_is_cached_and_reused(cache_dir, onnx_embedder, monkeypatch):
    from services.adapters.embedder import onnx_runtime

    (folder,) = [p for p in cache_dir.iterdir() if not p.name.startswith(".")]
    meta_mtime = (folder / "meta.json").stat().st_mtime_ns

    def no_export(*args, **kwargs):
        raise AssertionError("the cached export should have been reused")

    monkeypatch.setattr(onnx_runtime, "_export", no_export)
    again = onnx_runtime.OnnxEmbedder("all-MiniLM-L6-v2", cache_dir=cache_dir)
    assert (folder / "meta.json").stat().st_mtime_ns == meta_mtime
    np.testing.assert_allclose(again.encode(TEXTS[:1]), onnx_embedder.encode(TEXTS[:1]), atol=1e-6)


def test_unwritable_cache_names_the_setting(tmp_path):
    from services.adapters.embedder.onnx_runtime import OnnxEmbedder

    occupied = tmp_path / "a-file"
    occupied.write_text("not a folder")
    with pytest.raises(OrgmemError, match="embedder.cache_dir"):
        OnnxEmbedder("all-MiniLM-L6-v2", cache_dir=occupied)


def test_unknown_model_is_a_configuration_error(tmp_path):
    from services.adapters.embedder.onnx_runtime import OnnxEmbedder

    with pytest.raises(OrgmemError, match="cannot load embedding model"):
        OnnxEmbedder(str(tmp_path / "no-such-model"), cache_dir=tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []  # no half-written export is left behind
