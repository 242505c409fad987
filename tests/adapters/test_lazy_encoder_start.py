"""A CLI command that never queries loads no encoder model, and a corrupt model file stops a
command with one line that names the file (no traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RUN = """
import sys
from services.cli.main import main
rc = main(sys.argv[1:])
loaded = sorted(name for name in ("onnxruntime", "torch") if sys.modules.get(name) is not None)
print("LOADED", ",".join(loaded) or "-", "RC", rc)
"""


def run(args: list[str], env_cache: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(env_cache), "XDG_CACHE_HOME": str(env_cache),
           "ORGMEM_EMBEDDER__ENCODER_PROCESSES": "1"}
    return subprocess.run([sys.executable, "-c", RUN, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)


def test_export_loads_no_encoder_model(tmp_path):
    # The first run builds the cached graph (onnxruntime's quantiser); the second only reads it.
    for out in ("first.jsonl", "rows.jsonl"):
        done = run(["export", "--data", str(tmp_path / "data"), "--out", str(tmp_path / out)], tmp_path)
        assert done.returncode == 0, done.stderr
    assert "LOADED - RC 0" in done.stdout, done.stdout + done.stderr


def test_a_truncated_cached_model_fails_a_query_in_one_line_naming_it(tmp_path):
    data = tmp_path / "data"
    first = run(["export", "--data", str(data), "--out", str(tmp_path / "a.jsonl")], tmp_path)
    assert first.returncode == 0, first.stderr
    (model,) = (tmp_path / "orgmem" / "onnx").glob("*/model-int8.onnx")
    model.write_bytes(model.read_bytes()[:50_000])
    done = run(["query", "--data", str(data), "what changed"], tmp_path)
    assert "Traceback" not in done.stderr
    assert str(model) in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "RC 0" not in done.stdout


def test_encoder_processes_report_a_corrupt_model_naming_it_instead_of_hanging(tmp_path):
    from functools import partial

    from services.adapters.embedder.onnx_runtime import OnnxEmbedder
    from services.adapters.embedder.process_pool import ProcessPoolEmbedder
    from services.errors import OrgmemError

    local = OnnxEmbedder("all-MiniLM-L6-v2", cache_dir=tmp_path, load_now=False)
    (model,) = tmp_path.glob("*/model.onnx")
    model.write_bytes(model.read_bytes()[:50_000])
    factory = partial(OnnxEmbedder, "all-MiniLM-L6-v2", cache_dir=tmp_path)
    with pytest.raises(OrgmemError, match=str(model).replace(".", r"\.")):
        pool = ProcessPoolEmbedder(local, factory, 2, start_timeout_s=120)
        try:
            pool.encode(["a document"] * 8)
        finally:
            pool.close()
