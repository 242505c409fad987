"""The same sentence-transformers model, run by onnxruntime.

Measured on this 2-core AVX2 machine with all-MiniLM-L6-v2 and one thread: a 15-token query
takes 8.4 ms here against 27.8 ms through sentence-transformers/torch, with cosine 1.0 between
the two embeddings; batches of long documents encode ~15 % faster. The query path is where it
matters: the encoder was half of the end-to-end query latency.

The model is exported once from sentence-transformers (torch is imported only then) into a cache
folder, together with its tokenizer and pooling; later processes load only onnxruntime and
`tokenizers`, which also starts them seconds sooner.

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
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from services.adapters.embedder.clip import Clipper
from services.errors import OrgmemError

log = logging.getLogger(__name__)

# Bump when the exported files change meaning (2: the int8 copy was added; 3: eager attention).
EXPORT_FORMAT = 3
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
        self._session = ort.InferenceSession(str(self._model_file), options, providers=["CPUExecutionProvider"])
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
    log.info("preparing the encoder once: exporting %s to ONNX and quantising it to int8 in %s "
             "(about 20 s on two cores)", model, folder)
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
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no network at run time
    import torch
    from sentence_transformers import SentenceTransformer

    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # a weight-loading bar on the user's terminal
    try:
        st = SentenceTransformer(source, device="cpu")
    except Exception as exc:  # any loading failure is a configuration problem
        raise OrgmemError(f"cannot load embedding model {source!r}: {exc}") from exc
    transformer, pooling = st[0], st[1] if len(st) > 1 else None
    mode = getattr(pooling, "pooling_mode", None) or _pooling_mode(pooling)
    if mode not in POOLING_MODES:
        raise OrgmemError(f"embedder.backend: onnx supports {' and '.join(POOLING_MODES)} pooling, "
                          f"not {mode!r}; use backend 'torch' for this model")
    tokenizer = transformer.tokenizer
    if not getattr(tokenizer, "is_fast", False):
        raise OrgmemError("embedder.backend: onnx needs a model with a fast tokenizer; use backend 'torch'")

    class Pooled(torch.nn.Module):
        def __init__(self, encoder):
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **kwargs).last_hidden_state
            if mode == "cls":
                pooled = hidden[:, 0]
            else:
                mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1)

    # Eager attention exports as plain MatMul and Softmax nodes. PyTorch's fused attention
    # exports with extra masking nodes (Where, IsNaN per layer) that cost 0.5 of a 5.4 ms int8
    # query; the vectors are the same (cosine 1.0 in fp32).
    model = transformer.auto_model
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("eager")
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if "token_type_ids" in tokenizer.model_input_names else [])
    sample = tuple(torch.ones(2, 8, dtype=torch.long) for _ in names)
    axes = {name: {0: "batch", 1: "tokens"} for name in names} | {"embedding": {0: "batch"}}
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python control flow in the model code
        torch.onnx.export(Pooled(model.eval()), sample, str(staging / "model.onnx"),
                          input_names=names, output_names=["embedding"], dynamic_axes=axes,
                          opset_version=17, dynamo=False)
    _quantise(staging / MODEL_FILES["fp32"], staging / MODEL_FILES["int8"])
    tokenizer.backend_tokenizer.save(str(staging / "tokenizer.json"))
    dim = st.get_embedding_dimension() if hasattr(st, "get_embedding_dimension") else st.get_sentence_embedding_dimension()
    (staging / "meta.json").write_text(json.dumps({
        "source": source, "pooling": mode, "dim": int(dim),
        "pad_id": int(tokenizer.pad_token_id or 0), "pad_token": tokenizer.pad_token or "[PAD]",
    }))


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


def _pooling_mode(pooling) -> str | None:
    """Older sentence-transformers name the mode in flags instead of `pooling_mode`."""
    if getattr(pooling, "pooling_mode_mean_tokens", False):
        return "mean"
    if getattr(pooling, "pooling_mode_cls_token", False):
        return "cls"
    return None
