"""The same sentence-transformers model, run by onnxruntime.

Measured on this 2-core AVX2 machine with all-MiniLM-L6-v2 and one thread: a 15-token query
takes 8.4 ms here against 27.8 ms through sentence-transformers/torch, with cosine 1.0 between
the two embeddings; batches of long documents encode ~15 % faster. The query path is where it
matters: the encoder was half of the end-to-end query latency.

The graph is built once from the model folder's weights (onnx_graph.py: onnx and numpy, no
torch) into a cache folder, together with its tokenizer and pooling; every process then loads
only onnxruntime and `tokenizers`, which also starts them seconds sooner.

The export also writes an int8 copy (dynamic quantisation, per-channel weights) for queries: a
15-token query takes 3.7 ms instead of 7.7 ms, at cosine 0.994 on average (0.989 at worst over 200
LoCoMo questions) to the fp32 vector. Documents stay fp32; the quality cost of encoding only
the queries in int8 is measured in docs/retrieval.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from services.adapters.embedder.clip import Clipper
from services.errors import OrgmemError

log = logging.getLogger(__name__)

# Bump when the exported files change meaning (2: the int8 copy was added; 3: eager attention;
# 4: the graph is built from the weights by onnx_graph.py, without torch).
EXPORT_FORMAT = 4
POOLING_MODES = ("mean", "cls")
MODEL_FILES = {"fp32": "model.onnx", "int8": "model-int8.onnx"}


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "orgmem" / "onnx"


class OnnxEmbedder:
    def __init__(self, model: str, max_tokens: int = 256, batch_size: int = 64, threads: int | None = 1,
                 cache_dir: Path | None = None, precision: str = "fp32", load_now: bool = True):
        """load_now=False: the model session is loaded on the first `encode`, so that an encoder
        kept for its name and dimension (the server's, when encoder processes do every batch)
        costs neither its memory (~130 MiB for all-MiniLM-L6-v2 in fp32) nor its load time."""
        from tokenizers import Tokenizer

        if precision not in MODEL_FILES:
            raise OrgmemError(f"embedder.query_precision: expected one of {', '.join(MODEL_FILES)}, got {precision!r}")
        folder = _exported(model, Path(cache_dir) if cache_dir else default_cache_dir())
        meta = json.loads((folder / "meta.json").read_text())
        self._model_file, self._threads = folder / MODEL_FILES[precision], threads
        self._session, self._inputs = None, []
        if load_now:
            self._load()
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_tokens)
        # Each text is cut before it is tokenized, to a prefix that gives the same pieces: the
        # tokenizer would otherwise split a 1M-character document whole to keep 256 pieces.
        self._clipper = Clipper(self._tokenizer, max_tokens)
        # Pad to the longest text of a batch, never to a fixed length (some tokenizer files
        # carry a fixed 128, which made a 15-token query take 47 ms instead of 8).
        self._tokenizer.enable_padding(pad_id=meta["pad_id"], pad_token=meta["pad_token"])
        self.name = model if precision == "fp32" else f"{model} ({precision})"
        self.dim = int(meta["dim"])
        # int8 activations are scaled per run, so a vector would depend on its batch mates (and
        # on their padding); the quantised encoder therefore runs one text at a time.
        self.batch_size = batch_size if precision == "fp32" else 1
        self._lock = threading.Lock()
        log.debug("embedder %s through onnxruntime (dim %d, %d word pieces), model %s", self.name, self.dim,
                  max_tokens, "loaded" if load_now else "loaded at its first encode")

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        texts = self._clipper.clip_all(texts)
        # Similar lengths share a batch so that little of it is padding.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with self._lock:
            if self._session is None:
                self._load()
            for start in range(0, len(order), self.batch_size):
                chunk = order[start:start + self.batch_size]
                out[chunk] = self._run([texts[i] for i in chunk])
        return out

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def _load(self) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        # One thread, for the reason given in the sentence-transformers adapter: on 2 cores a
        # multi-threaded run spin-waits whenever the other core is busy.
        options.intra_op_num_threads = self._threads or 0
        options.inter_op_num_threads = 1
        try:
            self._session = ort.InferenceSession(str(self._model_file), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # a truncated or overwritten cache file: name it, and how to mend it
            raise OrgmemError(f"embedding model file {self._model_file} cannot be loaded ({type(exc).__name__}); "
                              f"delete its folder {self._model_file.parent} to rebuild it") from exc
        self._inputs = [i.name for i in self._session.get_inputs()]

    def _run(self, texts: list[str]) -> np.ndarray:
        # A single text (every query) is tokenized with `encode`, which keeps the interpreter
        # lock: `encode_batch` releases it, and getting it back from the query's lexical thread
        # cost 0.25 ms per query.
        encodings = [self._tokenizer.encode(texts[0])] if len(texts) == 1 else self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        feeds = {
            "input_ids": ids,
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        return self._session.run(None, {name: feeds[name] for name in self._inputs})[0]


def _exported(model: str, cache_dir: Path) -> Path:
    """The cache folder of this model, exporting it first when it is missing."""
    from services.adapters.embedder.sentence_transformers import resolve_model

    source = resolve_model(model)
    key = hashlib.sha256(json.dumps([EXPORT_FORMAT, source, _fingerprint(source)]).encode()).hexdigest()[:16]
    folder = cache_dir / (re.sub(r"[^\w.-]+", "_", model) + f"-{key}")
    if (folder / "meta.json").exists():
        return folder
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".export-", dir=cache_dir))
    except OSError as exc:
        raise OrgmemError(f"embedder.cache_dir: cannot write {cache_dir}: {exc}") from exc
    log.info("preparing the encoder once: building the ONNX graph of %s and its int8 copy in %s "
             "(a few seconds)", model, folder)
    try:
        _export(source, staging)
        staging.rename(folder)  # atomic; a concurrent exporter that won keeps its folder
    except OSError as exc:
        if not (folder / "meta.json").exists():
            raise OrgmemError(f"embedder.cache_dir: cannot write the export to {cache_dir}: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone after a rename; left over after a failure
    return folder


def _fingerprint(source: str) -> list:
    """Sizes and times of a local model's files, so that a changed model is exported again."""
    path = Path(source)
    if not path.is_dir():
        return []
    return sorted((str(f.relative_to(path)), f.stat().st_size, int(f.stat().st_mtime))
                  for f in path.rglob("*") if f.is_file())


def _export(source: str, staging: Path) -> None:
    """The encoder graph built from the model folder's weights (no torch), its int8 copy, the
    tokenizer and what the embedder needs to know of them."""
    from services.adapters.embedder import onnx_graph

    folder = Path(source)
    if not folder.is_dir():
        raise OrgmemError(f"cannot load embedding model {source!r}: not a local model folder; the onnx backend builds "
                          "its graph from a folder's files (use backend 'torch' to load a hub model)")
    tokenizer_file = folder / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise OrgmemError(f"embedder.backend: onnx needs a fast tokenizer file {tokenizer_file}; use backend 'torch'")
    described = onnx_graph.build(folder, staging / MODEL_FILES["fp32"])
    _quantise(staging / MODEL_FILES["fp32"], staging / MODEL_FILES["int8"])
    shutil.copyfile(tokenizer_file, staging / "tokenizer.json")
    (staging / "meta.json").write_text(json.dumps({
        "source": source, "pooling": described["pooling"], "dim": described["dim"],
        "pad_id": described["pad_id"], "pad_token": _pad_token(folder),
    }))


def _pad_token(folder: Path) -> str:
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        try:
            token = json.loads((folder / name).read_text()).get("pad_token")
        except (OSError, ValueError):
            continue
        if isinstance(token, dict):
            token = token.get("content")
        if isinstance(token, str):
            return token
    return "[PAD]"


def _quantise(source: Path, target: Path) -> None:
    """int8 weights for every MatMul with a weight matrix, one scale per output channel.

    Per-tensor scales measured a mean cosine of 0.972 to fp32 (0.945 at worst); per-channel,
    0.994. Keeping the attention or the feed-forward layers in fp32 gained at most 0.002 and gave
    back a third of the speed-up, so all weight MatMuls are quantised."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The quantiser logs through the root logger: a line per tensor at INFO and advice at
    # WARNING, about a hundred lines that say nothing to an orgmem user.
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul"])
    finally:
        root.setLevel(level)
