"""Public benchmarks as orgmem documents plus questions with gold rows, read from ../shared/data.

Each conversation, meeting, chat or mailbox becomes one tenant (a `Group`), so a question's scope
is exactly its own conversation. Gold evidence is named by (source, source_id) of the documents;
the store maps it to row ids after ingestion (a turn skipped as an exact repeat maps to the row it
repeats). Nothing here embeds or ranks: it only turns files into rows and questions.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from schemas.documents import DocumentIn

SHARED_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
DATASETS = ("locomo", "qmsum", "beam", "enron", "synthetic-org", "jsonl")
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


class DatasetMissing(FileNotFoundError):
    """The shared data folder does not hold the files a dataset needs."""


@dataclass(frozen=True)
class Question:
    qid: str
    text: str
    category: str
    group: str  # the tenant the question is scoped to
    gold: tuple[str, ...]  # source ids of the gold documents (source = Dataset.source_for)
    as_of: datetime | None = None  # the scope's bounds, as a query would pass them
    known_at: datetime | None = None
    version: str | None = None  # source id of the version that holds at the asked date
    superseded: tuple[str, ...] = ()  # source ids of the versions it replaced
    half: str | None = None  # "tune" or "held-out" where the dataset splits its own questions


@dataclass
class Group:
    key: str  # tenant
    documents: list[DocumentIn] = field(default_factory=list)
    mail_paths: list[Path] = field(default_factory=list)  # ingested by the email connector instead


@dataclass
class Dataset:
    name: str
    source: str
    groups: list[Group]
    questions: list[Question]
    dropped: Counter = field(default_factory=Counter)  # reason -> questions (or ids) dropped
    sources: dict[str, str] = field(default_factory=dict)  # source id -> source, where sources are mixed

    def source_for(self, source_id: str) -> str:
        return self.sources.get(source_id, self.source)

    def slice(self, groups: int) -> Dataset:
        """The first `groups` groups and their questions (for fast tests)."""
        keep = self.groups[:groups]
        keys = {g.key for g in keep}
        return Dataset(self.name, self.source, keep, [q for q in self.questions if q.group in keys], self.dropped,
                       self.sources)


def load(name: str, root: Path = SHARED_DATA, work_dir: Path | None = None, *, seeds: Sequence[int] = (1, 2, 3),
         documents: Path | None = None, questions: Path | None = None, log=sys.stderr) -> Dataset:
    """A dataset by name. `synthetic-org` is generated under work_dir from `seeds`; `jsonl` reads
    the `documents` and `questions` files (bad lines are reported on `log` and left out)."""
    if name == "synthetic-org":
        from bench.retrieval.synthetic_org import load_synthetic_org

        if work_dir is None:
            raise ValueError("work_dir: the organisation is generated there; required for dataset 'synthetic-org'")
        return load_synthetic_org(seeds, work_dir)
    if name == "jsonl":
        from bench.retrieval.jsonl import load_jsonl

        if documents is None or questions is None:
            raise ValueError("dataset 'jsonl' needs --documents FILE and --questions FILE")
        return load_jsonl(Path(documents), Path(questions), log=log)
    if name == "locomo":
        return load_locomo(root / "locomo" / "locomo10.json")
    if name == "qmsum":
        return load_qmsum(root / "qmsum" / "test.jsonl")
    if name == "beam":
        return load_beam(root / "beam" / "100K")
    if name == "enron":
        from bench.retrieval.enron import load_enron

        if work_dir is None:
            raise ValueError("work_dir: the Enron archive is extracted there; required for dataset 'enron'")
        return load_enron(root / "enron_agent_course" / "enron_agent_course_student_dataset.tar.gz", work_dir)
    raise ValueError(f"dataset: unknown dataset {name!r}; known: {', '.join(DATASETS)}")


def need_file(path: Path) -> Path:
    if not path.exists():
        raise DatasetMissing(f"{path}: not found (the shared data folder ../shared/data is absent or incomplete)")
    return path


# --- LoCoMo ----------------------------------------------------------------------------------
_LOCOMO_ID = re.compile(r"D:?(\d+):(\d+)")


def normalise_locomo_evidence(raw: str) -> list[str]:
    """`D8:6; D9:17` -> two ids, `D:11:26` -> D11:26, `D30:05` -> D30:5; pieces without a
    session and turn number are dropped."""
    return [f"D{int(s)}:{int(t)}" for s, t in _LOCOMO_ID.findall(raw)]


def _locomo_date(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def load_locomo(path: Path) -> Dataset:
    data = json.loads(need_file(path).read_text())
    groups, questions, dropped = [], [], Counter()
    for conv in data:
        sample, c = conv["sample_id"], conv["conversation"]
        docs, known = [], set()
        sessions = sorted(int(k.split("_")[1]) for k in c if re.fullmatch(r"session_\d+", k))
        for n in sessions:
            raw_date = c.get(f"session_{n}_date_time", "")
            date = _locomo_date(raw_date)
            for i, turn in enumerate(c[f"session_{n}"]):
                text = f"[{raw_date}] {turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" [shares a photo: {turn['blip_caption']}]"
                (dia,) = normalise_locomo_evidence(turn["dia_id"])
                known.add(dia)
                docs.append(DocumentIn(
                    text=text, author=turn["speaker"], date=date + timedelta(seconds=i), kind="chat",
                    thread=f"session_{n}", source="locomo", source_id=f"{sample}:{dia}",
                ))
        groups.append(Group(f"locomo-{sample}", docs))
        for i, qa in enumerate(conv["qa"]):
            category = qa.get("category")
            if category not in LOCOMO_CATEGORIES:
                dropped["category 5 (adversarial, no evidence)"] += 1
                continue
            ids = [e for raw in qa.get("evidence", []) for e in normalise_locomo_evidence(raw)]
            unresolved = [e for e in ids if e not in known]
            dropped["evidence ids pointing at no turn"] += len(unresolved)
            gold = tuple(dict.fromkeys(f"{sample}:{e}" for e in ids if e in known))
            if not gold:
                dropped["questions without resolvable evidence"] += 1
                continue
            questions.append(Question(f"{sample}/{i}", qa["question"], f"{category} {LOCOMO_CATEGORIES[category]}",
                                      f"locomo-{sample}", gold))
    return Dataset("locomo", "locomo", groups, questions, dropped)


# --- QMSum -----------------------------------------------------------------------------------
def load_qmsum(path: Path) -> Dataset:
    groups, questions, dropped = [], [], Counter()
    for m, line in enumerate(need_file(path).read_text().splitlines()):
        if not line.strip():
            continue
        meeting = json.loads(line)
        key = f"qmsum-{m:02d}"
        # Meetings carry no dates: one fixed day per meeting, turns a second apart keep their order.
        day = datetime(2020, 1, 1, tzinfo=UTC) + timedelta(days=m)
        docs, present = [], set()
        for t, turn in enumerate(meeting["meeting_transcripts"]):
            text = (turn.get("content") or "").strip()
            if not text:
                continue
            present.add(t)
            docs.append(DocumentIn(
                text=f"{turn['speaker']}: {text}", author=turn["speaker"], date=day + timedelta(seconds=t),
                kind="meeting", thread=key, source="qmsum", source_id=f"{key}:{t}",
            ))
        groups.append(Group(key, docs))
        for q, item in enumerate(meeting.get("specific_query_list", [])):
            turns = [t for start, end in item.get("relevant_text_span", []) for t in range(int(start), int(end) + 1)]
            gold = tuple(f"{key}:{t}" for t in dict.fromkeys(turns) if t in present)
            if not gold:
                dropped["queries without a non-empty gold turn"] += 1
                continue
            questions.append(Question(f"{key}/{q}", item["query"], "specific", key, gold))
    return Dataset("qmsum", "qmsum", groups, questions, dropped)


# --- BEAM 128K -------------------------------------------------------------------------------
_BEAM_MARK = re.compile(r"\s*->->\s*[\d,\s]+$")  # the generator's batch/turn marker after user text


def _beam_date(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.strptime(text.strip(), "%B-%d-%Y").replace(tzinfo=UTC)
    except ValueError:
        return None


def _flat_ids(value) -> list[int]:
    if value is None:
        return []
    if isinstance(value, dict):
        return [i for v in value.values() for i in _flat_ids(v)]
    if isinstance(value, list):
        return [i for v in value for i in _flat_ids(v)]
    return [int(value)] if str(value).strip().lstrip("-").isdigit() else []


def load_beam(folder: Path) -> Dataset:
    groups, questions, dropped = [], [], Counter()
    chats = sorted((p for p in need_file(folder).iterdir() if p.is_dir()), key=lambda p: int(p.name) if p.name.isdigit() else 0)
    for chat in chats:
        key = f"beam-{chat.name}"
        docs, present = [], set()
        anchor = datetime(2024, 1, 1, tzinfo=UTC)
        for batch in json.loads((chat / "chat.json").read_text()):
            batch_date = _beam_date(batch.get("time_anchor"))
            for turn in batch["turns"]:
                for msg in turn:
                    anchor = batch_date or _beam_date(msg.get("time_anchor")) or anchor
                    text = _BEAM_MARK.sub("", msg.get("content") or "").strip()
                    if not text:
                        continue
                    present.add(int(msg["id"]))
                    docs.append(DocumentIn(
                        text=text, author=msg["role"], date=anchor + timedelta(seconds=int(msg["id"])), kind="chat",
                        thread=f"batch-{batch['batch_number']}", source="beam", source_id=f"{key}:{msg['id']}",
                    ))
        groups.append(Group(key, docs))
        probes = json.loads((chat / "probing_questions.json").read_text())
        for ability, items in probes.items():
            for q, item in enumerate(items):
                ids = _flat_ids(item.get("source_chat_ids"))
                gold = tuple(f"{key}:{i}" for i in dict.fromkeys(ids) if i in present)
                if not gold:
                    dropped[f"{ability}: no source_chat_ids"] += 1
                    continue
                questions.append(Question(f"{key}/{ability}/{q}", item["question"], ability, key, gold))
    return Dataset("beam", "beam", groups, questions, dropped)
