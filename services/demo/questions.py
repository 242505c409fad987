"""Questions with gold answers over the decision threads.

Gold = the documents that hold the evidence: for what held on a date, the version in force (plus
the correction of it, once the correction exists); for who decided and why, the decision and the
recommendation it cites; for a chain of justifications, the decision, the recommendation and its
trigger; for contradicting statements, the statements and the rule they contradict. A question
about what held at a date also names that version and the versions it superseded, so a ranking
can be checked for putting the current fact above its history. Asked dates keep MARGIN_DAYS away
from every version and correction of the thread, so the answer does not hinge on time zones or on
whether a date bound means the start or the end of the day.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from itertools import pairwise

from services.demo.cast import human_date
from services.demo.corpus import END, Doc
from services.demo.storyline import MARGIN_DAYS, DecisionThread, Version

KINDS = ("current", "as_of", "who_decided", "what_changed", "correction", "justification", "contradiction")


@dataclass(eq=False)
class Question:
    question: str
    kind: str  # one of KINDS
    thread: str
    gold: list[Doc]
    answer: str
    as_of: date | None = None
    known_at: datetime | None = None
    version: Version | None = None  # the version that holds at the asked date (or now)
    superseded: list[Version] = field(default_factory=list)  # the versions it replaced


def _holding_question(thread: DecisionThread, version: Version, **fields) -> Question:
    return Question(thread=thread.topic.key, version=version, superseded=thread.superseded_by(version), **fields)


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
    topic = thread.topic
    spans = _intervals(thread)
    out: list[Question] = []
    docs, value, version = thread.holding(END + timedelta(days=1))
    out.append(_holding_question(thread, version, question=f"What is the current {topic.title}?", kind="current",
                                 gold=docs, answer=value))

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
        docs, value, version = thread.holding(day)
        out.append(_holding_question(thread, version, question=f"What was the {topic.title} on {day.isoformat()}?",
                                     kind="as_of", gold=docs, answer=value, as_of=day))

    day = _day_in(rng, rng.choice(spans))
    _, _, version = thread.holding(day)
    why = version.because
    out.append(_holding_question(
        thread, version, question=f"Who decided the {topic.title} that applied on {day.isoformat()}, and why?",
        kind="who_decided", gold=[version.doc] + ([why.advice_doc] if why else []), as_of=day,
        answer=version.author.name + (f", on {why.advice_author.name}'s recommendation" if why else "")))

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
        out.append(_holding_question(
            thread, thread.holding(end)[2], kind="what_changed", gold=_dedup(docs), answer=" -> ".join(values),
            question=f"How did the {topic.title} change between {start.isoformat()} and {end.isoformat()}?", as_of=end))

    if fix:
        v = fix.version
        out.append(_holding_question(thread, v, question=f"What {topic.title} was agreed on {human_date(v.day)}?",
                                     kind="correction", gold=[v.doc, fix.doc], answer=v.value))
        if with_known_at:
            # Bi-temporal: what the records said before the correction was written, assuming each
            # document was ingested on its own date (a replay in date order).
            seen = v.day + timedelta(days=max(1, (fix.day - v.day).days // 2))
            known = datetime.combine(seen, time(12, 0), tzinfo=UTC)
            out.append(_holding_question(
                thread, v, question=f"What did our records say the {topic.title} agreed on {human_date(v.day)} was, "
                f"as known on {seen.isoformat()}?", kind="correction", gold=[v.doc], answer=v.stated, known_at=known))
    out += _justification_questions(thread)
    out += _contradiction_questions(thread, rng)
    return out


def _justification_questions(thread: DecisionThread) -> list[Question]:
    """Why a rule changed, traced back: the decision, the recommendation it cites, that one's trigger."""
    out = []
    for v in thread.versions:
        if why := v.because:
            out.append(Question(
                f"Why did the {thread.topic.title} change on {human_date(v.day)}, and what was that based on?",
                "justification", thread.topic.key, [v.doc, *why.docs],
                f"{why.trigger_subject} -> recommendation by {why.advice_author.name} -> decision by {v.author.name}"))
    return out


def _contradiction_questions(thread: DecisionThread, rng: random.Random) -> list[Question]:
    """Who said otherwise in a stretch of days inside one version's time, and what the rule was then."""
    out, topic = [], thread.topic
    bounds = [*thread.boundaries(), END + timedelta(days=MARGIN_DAYS + 1)]
    for statement in thread.statements():
        before = max(b for b in bounds if b < statement.day)
        after = min(b for b in bounds if b > statement.day)
        lo = max(before + timedelta(days=MARGIN_DAYS), statement.day - timedelta(days=rng.randint(3, 12)))
        hi = min(after - timedelta(days=MARGIN_DAYS), statement.day + timedelta(days=rng.randint(3, 12)))
        if not lo <= statement.day < hi:
            continue
        said = [s for s in thread.statements() if lo <= s.day < hi]
        if any(q.gold[: len(said)] == [s.doc for s in said] for q in out):
            continue  # both statements fell in one stretch: asked once
        docs, value, version = thread.holding(hi)
        out.append(_holding_question(
            thread, version, kind="contradiction", gold=[*(s.doc for s in said), *docs], as_of=hi,
            question=f"Between {lo.isoformat()} and {hi.isoformat()}, who contradicted the official {topic.title}, "
                     f"and what was the rule then?",
            answer="; ".join(f"{s.author.name} said {s.value}" for s in said) + f"; the rule was {value}"))
    return out
