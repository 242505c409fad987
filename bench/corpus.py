"""Realistic texts for the speed benchmarks, read from ../shared/data (never copied into the project).

LoCoMo turns and QMSum meeting turns give real conversational lengths; for store sizes beyond
what they hold, texts are reused with a distinguishing prefix so that each row is distinct.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from schemas.documents import DocumentIn

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def base_texts() -> list[tuple[str, str]]:
    """(author, text) pairs from LoCoMo and QMSum."""
    out: list[tuple[str, str]] = []
    locomo = SHARED / "locomo" / "locomo10.json"
    if locomo.exists():
        for conv in json.loads(locomo.read_text()):
            c = conv["conversation"]
            for key, turns in c.items():
                if key.startswith("session_") and isinstance(turns, list):
                    out.extend((t["speaker"], t["text"]) for t in turns if t.get("text"))
    qmsum = SHARED / "qmsum" / "test.jsonl"
    if qmsum.exists():
        for line in qmsum.read_text().splitlines():
            for turn in json.loads(line)["meeting_transcripts"]:
                if turn.get("content", "").strip():
                    out.append((turn["speaker"], turn["content"]))
    if not out:
        raise SystemExit(f"benchmark corpus not found under {SHARED}: LoCoMo or QMSum is needed")
    return out


def documents(n: int) -> list[DocumentIn]:
    texts = base_texts()
    start = datetime(2024, 1, 1, tzinfo=UTC)
    docs = []
    for i in range(n):
        author, text = texts[i % len(texts)]
        copy = i // len(texts)
        docs.append(DocumentIn(
            text=text if copy == 0 else f"[note {copy}] {text}",
            author=author, date=start + timedelta(minutes=7 * i), kind="chat",
            source="bench", source_id=str(i),
        ))
    return docs


def queries(n: int = 200) -> list[str]:
    locomo = SHARED / "locomo" / "locomo10.json"
    qs = [qa["question"] for conv in json.loads(locomo.read_text()) for qa in conv["qa"]] if locomo.exists() else []
    if not qs:
        qs = [t for _, t in base_texts()[:n]]
    step = max(len(qs) // n, 1)
    return qs[::step][:n]
