"""A BERT sentence encoder written directly as an ONNX graph, from a model folder's weights.

This replaces the one-time export through torch: the graph is small and fixed (embeddings, N
encoder layers, masked mean or CLS pooling, L2 normalisation), so building it with `onnx.helper`
and numpy lets a server run with onnxruntime and `tokenizers` only, without installing torch
(about 2/3 of a fresh venv). The vectors match the torch export (test_onnx_graph.py).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from services.errors import OrgmemError

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OPSET = 17  # LayerNormalization is an operator from 17 on


def load_weights(folder: Path) -> dict[str, np.ndarray]:
    """The model's tensors, from model.safetensors (numpy API: no torch needed)."""
    from safetensors.numpy import load_file

    path = folder / "model.safetensors"
    if not path.is_file():
        raise OrgmemError(f"embedder.backend: onnx needs {path} (model.safetensors); use backend 'torch' for this model")
    try:
        tensors = load_file(str(path))
    except Exception as exc:  # a truncated or foreign file: name it
        raise OrgmemError(f"embedding model file {path} is unreadable: {exc}") from exc
    # Some checkpoints prefix every name with the architecture ("bert.").
    return {name.removeprefix("bert."): value for name, value in tensors.items()}


def model_description(folder: Path) -> dict:
    """Architecture, pooling and normalisation, read from the sentence-transformers files."""
    try:
        config = json.loads((folder / "config.json").read_text())
        modules = json.loads((folder / "modules.json").read_text()) if (folder / "modules.json").exists() else []
    except (OSError, ValueError) as exc:
        raise OrgmemError(f"embedding model folder {folder}: unreadable config.json/modules.json: {exc}") from exc
    if config.get("model_type") != "bert" or config.get("hidden_act", "gelu") != "gelu":
        raise OrgmemError(f"embedder.backend: onnx builds BERT encoders with GELU only, not "
                          f"{config.get('model_type')!r}; use backend 'torch' for this model")
    mode = "mean"
    pooling = next((m for m in modules if m.get("type", "").endswith("Pooling")), None)
    if pooling:
        pool_config = json.loads((folder / pooling["path"] / "config.json").read_text())
        modes = [name for name in ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens")
                 if pool_config.get(f"pooling_mode_{name}")]
        if modes not in (["cls_token"], ["mean_tokens"]):
            raise OrgmemError(f"embedder.backend: onnx supports mean and cls pooling, not {modes}; use backend 'torch'")
        mode = "cls" if modes == ["cls_token"] else "mean"
    return {"config": config, "pooling": mode,
            "normalize": any(m.get("type", "").endswith("Normalize") for m in modules)}


def build(folder: Path, target: Path) -> dict:
    """Write the encoder graph of the model in `folder` to `target`; returns its description."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    described = model_description(folder)
    config, weights = described["config"], load_weights(folder)
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    head_dim, eps = hidden // heads, float(config.get("layer_norm_eps", 1e-12))
    nodes, inits = [], []
    counter = iter(range(1_000_000))

    def const(value, dtype=np.float32) -> str:
        name = f"c{next(counter)}"
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def weight(name: str, transpose: bool = False) -> str:
        if name not in weights:
            raise OrgmemError(f"embedding model {folder}: tensor {name!r} is missing from model.safetensors")
        value = weights[name].astype(np.float32)
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value.T if transpose else value), name))
        return name

    def op(kind: str, *inputs: str, **attrs) -> str:
        out = f"{kind.lower()}{next(counter)}"
        nodes.append(helper.make_node(kind, list(inputs), [out], **attrs))
        return out

    def dense(x: str, prefix: str) -> str:
        return op("Add", op("MatMul", x, weight(f"{prefix}.weight", transpose=True)), weight(f"{prefix}.bias"))

    def layer_norm(x: str, prefix: str) -> str:
        return op("LayerNormalization", x, weight(f"{prefix}.weight"), weight(f"{prefix}.bias"), axis=-1, epsilon=eps)

    ids, mask, types = INPUTS
    length = op("Gather", op("Shape", ids), const(1, np.int64), axis=0)
    positions = op("Range", const(0, np.int64), length, const(1, np.int64))
    x = op("Add", op("Gather", weight("embeddings.word_embeddings.weight"), ids),
           op("Gather", weight("embeddings.position_embeddings.weight"), positions))
    x = op("Add", x, op("Gather", weight("embeddings.token_type_embeddings.weight"), types))
    x = layer_norm(x, "embeddings.LayerNorm")
    fmask = op("Cast", mask, to=TensorProto.FLOAT)
    # Padded keys get the dtype's minimum added before the softmax, as the eager BERT code does.
    bias = op("Mul", op("Sub", const(1.0), fmask), const(np.finfo(np.float32).min))
    bias = op("Unsqueeze", bias, const([1, 2], np.int64))  # [B, 1, 1, T]
    split = const([0, 0, heads, head_dim], np.int64)
    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}"

        def heads_of(name: str, perm: list[int]) -> str:
            return op("Transpose", op("Reshape", dense(x, f"{p}.attention.self.{name}"), split), perm=perm)

        scores = op("MatMul", heads_of("query", [0, 2, 1, 3]), heads_of("key", [0, 2, 3, 1]))
        scores = op("Add", op("Mul", scores, const(1.0 / math.sqrt(head_dim))), bias)
        context = op("MatMul", op("Softmax", scores, axis=-1), heads_of("value", [0, 2, 1, 3]))
        context = op("Reshape", op("Transpose", context, perm=[0, 2, 1, 3]), const([0, 0, hidden], np.int64))
        x = layer_norm(op("Add", dense(context, f"{p}.attention.output.dense"), x), f"{p}.attention.output.LayerNorm")
        inner = dense(x, f"{p}.intermediate.dense")
        gelu = op("Mul", op("Mul", inner, const(0.5)),
                  op("Add", op("Erf", op("Mul", inner, const(1.0 / math.sqrt(2.0)))), const(1.0)))
        x = layer_norm(op("Add", dense(gelu, f"{p}.output.dense"), x), f"{p}.output.LayerNorm")
    if described["pooling"] == "cls":
        pooled = op("Squeeze", op("Gather", x, const([0], np.int64), axis=1), const([1], np.int64))
    else:
        weights3 = op("Unsqueeze", fmask, const([2], np.int64))
        total = op("ReduceSum", op("Mul", x, weights3), const([1], np.int64), keepdims=0)
        count = op("Max", op("ReduceSum", weights3, const([1], np.int64), keepdims=0), const(1e-9))
        pooled = op("Div", total, count)
    # Always unit length, as the torch export was: the vector index and the cache compare by
    # dot product, whether or not the model lists a Normalize module.
    norm = op("Sqrt", op("ReduceSum", op("Mul", pooled, pooled), const([1], np.int64), keepdims=1))
    pooled = op("Div", pooled, op("Max", norm, const(1e-12)))
    nodes.append(helper.make_node("Identity", [pooled], ["embedding"]))
    graph = helper.make_graph(
        nodes, "sentence_encoder",
        [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "tokens"]) for name in INPUTS],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="orgmem")
    model.ir_version = 8  # readable by every onnxruntime of the last years
    onnx.save(model, str(target))
    return {"pooling": described["pooling"], "dim": hidden, "pad_id": int(config.get("pad_token_id") or 0)}
