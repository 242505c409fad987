"""A new user's first command exports the encoder to ONNX once; their terminal shows one line for
it, not the libraries' INFO chatter (onnxruntime's quantiser alone logs about a hundred lines)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_the_one_off_encoder_export_prints_one_line(tmp_path):
    env = {**os.environ, "ORGMEM_EMBEDDER__CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "services.cli", "query", "remote work policy",
                           "--data", str(tmp_path / "data")], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines[:20]
    assert "preparing the encoder once" in lines[0]
    assert list((tmp_path / "cache").glob("*/meta.json")), "the export was not kept"
    again = subprocess.run([sys.executable, "-m", "services.cli", "query", "remote work policy",
                            "--data", str(tmp_path / "data")], env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and again.stderr.strip() == "", again.stderr[-2000:]
