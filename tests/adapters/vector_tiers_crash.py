"""A process that seals a tiered vector index and kills itself with SIGKILL at one named step of
the build (tests/adapters/test_vector_tiers.py reopens the folder afterwards).

    python -m tests.adapters.vector_tiers_crash FOLDER STEP
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import numpy as np

from services.adapters.vector.qdrant_edge_tiers import TieredEdgeVectorIndex
from tests.contract.test_vector_index import DIM, make_row, unit

ROWS = 300
DURING = 10  # rows upserted while the child builds


def rows_and_vectors():
    rows = [make_row(f"r{i:04d}", i + 1, acl=["eng"] if i % 3 else []) for i in range(ROWS + DURING)]
    return rows, unit(np.random.default_rng(42), len(rows))


def main() -> None:
    folder, kill_at = Path(sys.argv[1]), sys.argv[2]
    rows, vectors = rows_and_vectors()
    armed = False

    def on_step(step: str) -> None:
        if not armed:
            return
        if step == "child-started":  # writes during the build: a state change and new rows
            index.update_state([rows[7].model_copy(update={"state": "archived"})])
            index.upsert(rows[ROWS:], vectors[ROWS:])
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    index = TieredEdgeVectorIndex(folder, DIM, on_step=on_step)
    index.upsert(rows[:200], vectors[:200])
    index.optimize()  # a sealed shard to start from
    index.upsert(rows[200:ROWS], vectors[200:ROWS])
    index.update_state([rows[5].model_copy(update={"state": "archived"})])
    armed = True
    index.optimize()
    sys.exit(0)  # never reached for a step the build passes


if __name__ == "__main__":
    main()
