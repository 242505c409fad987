"""Questions with gold answers over the decision threads.

Gold = the documents that state the answer at the asked date: the version in force (plus the
correction of it, once the correction exists). Asked dates keep MARGIN_DAYS away from every
version and correction of the thread, so the answer does not hinge on time zones or on whether
a date bound means the start or the end of the day.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from itertools import pairwise

from services.demo.cast import human_date
from services.demo.corpus import END, Doc
from services.demo.storyline import MARGIN_DAYS, DecisionThread


@dataclass(eq=False)
class Question:
    question: str
    kind: str  # current | as_of | who_decided | what_changed | correction
    thread: str
    gold: list[Doc]
    answer: str
    as_of: date | None = None
    known_at: datetime | None = None


def _intervals(thread: DecisionThread) -> list[tuple[date, date]]:
    """Stretches between consecutive versions/corrections where an asked date is unambiguous."""
    bounds = thread.boundaries() + [END + timedelta(days=MARGIN_DAYS + 1)]
    return [(a, b) for a, b in pairwise(bounds) if (b - a).days >= 2 * MARGIN_DAYS + 1]


def _day_in(rng: random.Random, span: tuple[date, date]) -> date:
    lo, hi = span
    return lo + timedelta(days=rng.randint(MARGIN_DAYS, (hi - lo).days - MARGIN_DAYS))


def _dedup(docs: list[Doc]) -> list[Doc]:
    seen: list[Doc] = []
    for doc in docs:
        if not any(doc is s for s in seen):
            seen.append(doc)
    return seen


def questions_for(thread: DecisionThread, rng: random.Random, *, with_known_at: bool) -> list[Question]:
    topic, key = thread.topic, thread.topic.key
    spans = _intervals(thread)
    out: list[Question] = []
    docs, value, _ = thread.holding(END + timedelta(days=1))
    out.append(Question(f"What is the current {topic.title}?", "current", key, docs, value))

    # As-of: one while a correction was still pending (the documents then said the wrong figure),
    # one after a contradiction from another team (the latest message is then not the answer),
    # otherwise random stretches.
    preferred: list[tuple[date, date]] = []
    fix, clash = thread.correction, thread.contradiction
    if fix:
        preferred += [s for s in spans if s[0] in (fix.version.day, fix.day)][:1]
    if clash:
        preferred += [s for s in spans if s[0] < clash.day < s[1] - timedelta(days=MARGIN_DAYS) and s not in preferred][:1]
    others = [s for s in spans if s not in preferred]
    chosen = (preferred + rng.sample(others, k=len(others)))[:2]
    for span in chosen:
        day = _day_in(rng, span)
        if clash and span[0] < clash.day < span[1] - timedelta(days=MARGIN_DAYS):
            day = clash.day + timedelta(days=rng.randint(1, (span[1] - clash.day).days - MARGIN_DAYS))
        docs, value, _ = thread.holding(day)
        out.append(Question(f"What was the {topic.title} on {day.isoformat()}?", "as_of", key, docs, value, as_of=day))

    day = _day_in(rng, rng.choice(spans))
    _, _, version = thread.holding(day)
    out.append(Question(f"Who decided the {topic.title} that applied on {day.isoformat()}?", "who_decided", key,
                        [version.doc], version.author.name, as_of=day))

    if len(spans) >= 3:
        start, end = _day_in(rng, spans[0]), _day_in(rng, rng.choice(spans[2:]))
        docs, first, _ = thread.holding(start)
        values = [first]
        for bound in thread.boundaries():
            if start < bound < end:
                more, value, _ = thread.holding(bound + timedelta(days=1))
                docs = docs + more
                if value != values[-1]:
                    values.append(value)
        out.append(Question(f"How did the {topic.title} change between {start.isoformat()} and {end.isoformat()}?",
                            "what_changed", key, _dedup(docs), " -> ".join(values), as_of=end))

    if fix:
        v = fix.version
        out.append(Question(f"What {topic.title} was agreed on {human_date(v.day)}?", "correction", key,
                            [v.doc, fix.doc], v.value))
        if with_known_at:
            # Bi-temporal: what the records said before the correction was written, assuming each
            # document was ingested on its own date (a replay in date order).
            seen = v.day + timedelta(days=max(1, (fix.day - v.day).days // 2))
            known = datetime.combine(seen, time(12, 0), tzinfo=UTC)
            out.append(Question(f"What did our records say the {topic.title} agreed on {human_date(v.day)} was, "
                                f"as known on {seen.isoformat()}?", "correction", key, [v.doc], v.stated,
                                known_at=known))
    return out
