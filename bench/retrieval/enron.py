"""The Enron agent-course sample: one tenant per mailbox or pack, ingested by the email connector.

Each golden question names the mailbox or pack it is limited to; that folder is its scope. Gold
rows are the evidence Message-IDs, which the connector stores as `source_id` (without brackets).
"""

from __future__ import annotations

import json
import tarfile
from collections import Counter
from pathlib import Path

from bench.retrieval.datasets import Dataset, Group, Question, need_file

_SOURCE = "email"  # services.connectors.email.SOURCE, repeated to keep this import-light


def _extract(archive: Path, work_dir: Path) -> Path:
    root = work_dir / "enron-src"
    done = root / ".extracted"
    if not done.exists():
        root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            # The "data" filter refuses absolute paths and links out of the folder (Python >= 3.11.4).
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(root, **safe)
        done.write_text(archive.name)
    [golden] = root.rglob("golden_set.json")
    return golden.parent.parent


def load_enron(archive: Path, work_dir: Path) -> Dataset:
    base = _extract(need_file(archive), work_dir)
    folders = sorted(p for kind in ("full_mailboxes", "packs") for p in (base / "mail" / kind).iterdir() if p.is_dir())
    groups = [Group(f"enron-{p.name}", mail_paths=[p]) for p in folders]
    # Longest name first: a pack name can be a prefix of another (…california_crisis__press).
    names = sorted((p.name for p in folders), key=len, reverse=True)
    questions, dropped = [], Counter()
    for record in json.loads((base / "golden_set" / "golden_set.json").read_text()):
        prompt = record["prompt"]
        scope = next((n for n in names if n in prompt), None)
        gold = tuple(dict.fromkeys(
            i.strip().strip("<>") for i in record["golden_answer"].get("evidence_message_ids", []) if i.strip()
        ))
        if scope is None or not gold:
            dropped["questions naming no known mailbox or pack, or without evidence"] += 1
            continue
        questions.append(Question(record["id"], prompt, record.get("difficulty", "all"), f"enron-{scope}", gold))
    return Dataset("enron", _SOURCE, groups, questions, dropped)
