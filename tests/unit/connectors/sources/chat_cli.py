"""`orgmem connect <source>` run as the operator runs it (a subprocess on a real data folder), and
the row ids a source's versions get: shared by the chat sources' end-to-end tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from schemas.documents import DocumentIn
from services.connectors.contract import MemoryTree, Source, Version, source_id_of
from services.core.write_rules import row_id_for

ROOT = Path(__file__).resolve().parents[4]


def connect(source: str, data: Path, export: Path, access: Path, *options: str) -> dict:
    """The run's JSON report (the CLI's last line); the run must succeed."""
    env = {**os.environ, "ORGMEM_DATA_DIR": str(data)}
    done = subprocess.run([sys.executable, "-m", "services.cli", "connect", source, str(export),
                           "--access-map", str(access), *options], capture_output=True, text=True, env=env,
                          timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def row_ids(source: Source, files: dict[str, bytes]) -> dict[str, str]:
    """item -> the row id of its version in this export (tenant 'default')."""
    found = [f for f in source.read(MemoryTree(files), {}) if isinstance(f, Version)]
    return {f.item: row_id_for("default", DocumentIn(text="-", source=source.name, source_id=source_id_of(f)))
            for f in found}
