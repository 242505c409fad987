"""The `orgmem` command keeps OpenBLAS to one thread, set before numpy loads (services/cli/__init__.py):
its spinning threads took the cores from the query encoder. An operator's own value is kept."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = ("import sys, os; import services.cli; loaded = 'numpy' in sys.modules; import services.cli.main; "
         "print(loaded, os.environ.get('OPENBLAS_NUM_THREADS'))")


def run_probe(**env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    return subprocess.run([sys.executable, "-c", PROBE], env={**base, **env}, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_one_blas_thread_is_set_before_numpy_is_imported():
    assert run_probe() == "False 1"


def test_an_operators_own_thread_count_is_kept():
    assert run_probe(OPENBLAS_NUM_THREADS="2") == "False 2"
