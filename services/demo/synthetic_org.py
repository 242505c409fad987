"""A deterministic synthetic organisation, written as the files the connectors read.

`generate(out_dir)` writes, from a seed alone (no clock, no network):
  mail/org.mbox        real mbox; Message-ID, Date, From, To, Cc, Subject, In-Reply-To/References
  tickets/jira.json    Jira REST search shape, comments with ids
  meetings/*.vtt       WebVTT, `YYYY-MM-DD-<slug>.vtt`, NOTE date/organiser/title blocks, <v> voices
  questions.json       questions with gold (source, source_id) pairs of the evidence and, where a
                       question asks what held at a date, the version then in force and the
                       versions it superseded

Run `python -m services.demo.synthetic_org OUT_DIR [--seed N] [--threads N] [--filler F]`.
"""

from __future__ import annotations

import argparse
import json
import mailbox
import random
import sys
import textwrap
import time
from dataclasses import dataclass
from datetime import datetime
from email.contentmanager import raw_data_manager
from email.header import Header
from email.message import EmailMessage
from email.policy import compat32
from email.utils import format_datetime, formataddr
from pathlib import Path

from schemas.documents import DocumentIn
from services.core.write_rules import row_id_for
from services.demo.cast import DOMAIN, TOPICS, Person
from services.demo.corpus import Corpus, Mail, Meeting, Ticket, doc_ref, local_time
from services.demo.filler import (
    add_announcements,
    add_meetings,
    add_newsletters,
    add_status_mail,
    add_tickets,
)
from services.demo.questions import Question, questions_for
from services.demo.storyline import DecisionThread, plan_thread, render_thread

KNOWN_AT_QUESTIONS = 2  # bi-temporal questions are few: they assume a replay in date order

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@dataclass(frozen=True)
class GeneratedOrg:
    root: Path
    seed: int
    mbox: Path
    jira: Path
    meetings: Path
    questions_path: Path
    counts: dict[str, int]
    questions: list[dict]
    threads: list[dict]  # per decision thread: its versions, correction and contradiction, with refs


def generate(out_dir: Path, seed: int = 7, threads: int = 36, filler: float = 1.0) -> GeneratedOrg:
    """Writes the organisation under out_dir (rewriting earlier output there); same seed, same bytes.
    `filler` scales the everyday traffic around the decisions (1 = the demo's organisation)."""
    if not 1 <= threads <= len(TOPICS):
        raise ValueError(f"threads: must be between 1 and {len(TOPICS)}, got {threads}")
    if not 0 <= filler <= 2:
        raise ValueError(f"filler: must be between 0 and 2, got {filler}")
    out_dir = Path(out_dir)
    rng = random.Random(seed)
    topics = rng.sample(TOPICS, threads)
    corrected = set(rng.sample(range(threads), k=max(1, round(threads * 0.35))))
    contradicted = set(rng.sample(range(threads), k=max(1, round(threads * 0.4))))
    html_thread = rng.randrange(threads)

    corpus = Corpus()
    plans: list[DecisionThread] = []
    for i, topic in enumerate(topics):
        # One Random per thread, so a thread's story does not depend on how many others exist.
        thread_rng = random.Random(f"{seed}/{topic.key}")
        plan = plan_thread(topic, thread_rng, corrected=i in corrected, contradicted=i in contradicted,
                           html=i == html_thread)
        render_thread(plan, corpus, thread_rng)
        plans.append(plan)
    filler_rng = random.Random(f"{seed}/filler")
    add_status_mail(corpus, filler_rng, share=min(filler, 1.0))
    add_newsletters(corpus, filler_rng)
    add_announcements(corpus, filler_rng, count=round(60 * filler))
    add_tickets(corpus, filler_rng, count=round(130 * filler))
    add_meetings(corpus, filler_rng, count=round(45 * filler))
    corpus.assign_ids(DOMAIN)

    question_rng = random.Random(f"{seed}/questions")
    questions: list[Question] = []
    known_left = KNOWN_AT_QUESTIONS
    for plan in plans:
        with_known = plan.correction is not None and known_left > 0
        known_left -= with_known
        questions += questions_for(plan, question_rng, with_known_at=with_known)
    question_dicts = [_question_json(n, q) for n, q in enumerate(questions, start=1)]

    paths = _write(out_dir, corpus, question_dicts)
    comments = sum(len(t.comments) for t in corpus.tickets)
    counts = {
        "emails": len(corpus.mails),
        "jira_issues": len(corpus.tickets),
        "jira_comments": comments,
        "meetings": len(corpus.meetings),
        "documents": len(corpus.mails) + len(corpus.tickets) + comments + len(corpus.meetings),
        "decision_threads": len(plans),
        "questions": len(question_dicts),
    }
    return GeneratedOrg(out_dir, seed, *paths, counts, question_dicts, [_thread_json(p) for p in plans])


def gold_row_ids(question: dict, tenant: str = "default") -> list[str]:
    """The row ids orgmem gives the gold documents of a question (ids hash tenant, source, source_id)."""
    return [row_id_for(tenant, DocumentIn(text="x", source=g["source"], source_id=g["source_id"]))
            for g in question["gold"]]


def _question_json(n: int, q: Question) -> dict:
    return {
        "id": f"q{n:03d}",
        "question": q.question,
        "as_of": q.as_of.isoformat() if q.as_of else None,
        "known_at": q.known_at.isoformat() if q.known_at else None,
        "gold": [doc_ref(d) for d in q.gold],
        "version": doc_ref(q.version.doc) if q.version else None,
        "superseded": [doc_ref(v.doc) for v in q.superseded],
        "thread": q.thread,
        "kind_of_question": q.kind,
        "answer": q.answer,
    }


def _thread_json(plan: DecisionThread) -> dict:
    def event(day, author: Person, doc, **extra) -> dict:
        return {"date": day.isoformat(), "author": author.name, **doc_ref(doc), **extra}

    def justification(v) -> dict | None:
        why = v.because
        if why is None:
            return None
        return {"recommendation": event(why.advice_day, why.advice_author, why.advice_doc),
                "trigger": event(why.trigger_day, why.trigger_author, why.trigger_doc, subject=why.trigger_subject)}

    fix, clash, stale = plan.correction, plan.contradiction, plan.stale
    return {
        "thread": plan.topic.key,
        "title": plan.topic.title,
        "versions": [event(v.day, v.author, v.doc, action=v.action, channel=v.channel, value=v.value,
                           stated=v.stated, because=justification(v))
                     for v in plan.versions],
        "correction": event(fix.day, fix.author, fix.doc, corrects=doc_ref(fix.version.doc)["source_id"])
        if fix else None,
        "contradiction": event(clash.day, clash.author, clash.doc, value=clash.value) if clash else None,
        "stale": event(stale.day, stale.author, stale.doc, value=stale.value) if stale else None,
    }


# --- writers --------------------------------------------------------------------------------

def _write(out: Path, corpus: Corpus, questions: list[dict]) -> tuple[Path, Path, Path, Path]:
    mail_dir, ticket_dir, meeting_dir = out / "mail", out / "tickets", out / "meetings"
    for folder in (mail_dir, ticket_dir, meeting_dir):
        folder.mkdir(parents=True, exist_ok=True)
    mbox_path = mail_dir / "org.mbox"
    if mbox_path.exists():
        mbox_path.unlink()  # mailbox.mbox appends; a rerun must rewrite, not grow
    box = mailbox.mbox(mbox_path, create=True)
    try:
        for n, mail in enumerate(sorted(corpus.mails, key=lambda m: m.when)):
            box.add(_message(mail, n))
        box.flush()
    finally:
        box.close()

    jira_path = ticket_dir / "jira.json"
    issues = [_issue(t) for t in sorted(corpus.tickets, key=lambda t: (t.project, int(t.key.split("-")[1])))]
    search = {"startAt": 0, "maxResults": len(issues), "total": len(issues), "issues": issues}
    jira_path.write_text(json.dumps(search, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    for stale in meeting_dir.glob("*.vtt"):
        stale.unlink()  # a smaller or differently seeded run must not leave old meetings behind
    for meeting in corpus.meetings:
        (meeting_dir / f"{meeting.stem}.vtt").write_text(_vtt(meeting), encoding="utf-8", newline="\n")

    questions_path = out / "questions.json"
    questions_path.write_text(json.dumps(questions, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return mbox_path, jira_path, meeting_dir, questions_path


def _asctime(when: datetime) -> str:
    return f"{_DAYS[when.weekday()]} {_MONS[when.month - 1]} {when.day:2d} {when:%H:%M:%S} {when.year}"


def _address(name: str, addr: str) -> str:
    return formataddr((name, addr))  # RFC 2047-encodes non-ASCII names


def _message(mail: Mail, n: int) -> EmailMessage:
    # compat32 stores headers as given instead of re-parsing each one, which makes writing the
    # mbox several times faster; the bytes are the same standard message either way.
    msg = EmailMessage(policy=compat32)
    msg["Message-ID"] = f"<{mail.msg_id}>"
    msg["Date"] = format_datetime(local_time(mail.when, mail.author))
    msg["From"] = _address(mail.author.name, mail.author.email)
    msg["To"] = ", ".join(_address(*r) for r in mail.to)
    if mail.cc:
        msg["Cc"] = ", ".join(_address(*r) for r in mail.cc)
    msg["Subject"] = mail.subject if mail.subject.isascii() else Header(mail.subject, "utf-8").encode()
    if mail.parent is not None:
        chain, node = [], mail.parent
        while node is not None:
            chain.insert(0, f"<{node.msg_id}>")
            node = node.parent
        msg["In-Reply-To"] = chain[-1]
        msg["References"] = " ".join(chain)
    if mail.html is not None and not mail.body:
        msg.set_content(mail.html, subtype="html", content_manager=raw_data_manager)
    elif mail.html is not None:
        msg.set_content(mail.body, content_manager=raw_data_manager)
        msg.add_alternative(mail.html, subtype="html", content_manager=raw_data_manager)
        msg.set_boundary(f"=_kb_alt_{n:05d}")  # the email package would pick a random one
    else:
        msg.set_content(_wrap(mail.body), charset=mail.charset, content_manager=raw_data_manager)
    # Without an explicit envelope line mailbox writes the current time; fix it for reproducibility.
    msg.set_unixfrom(f"From {mail.author.email} {_asctime(mail.when)}")
    return msg


def _wrap(body: str) -> str:
    """Wraps long lines as mail clients do, which keeps most bodies 7-bit and readable in the file."""
    return "\n".join(textwrap.fill(line, 72, break_on_hyphens=False) if len(line) > 76 else line
                     for line in body.split("\n"))


def _person(person: Person | None) -> dict | None:
    if person is None:
        return None
    return {"displayName": person.name, "emailAddress": person.email}


def _jira_time(when: datetime, person: Person) -> str:
    local = local_time(when, person)
    return f"{local:%Y-%m-%dT%H:%M:%S}.000{local:%z}"


def _issue(ticket: Ticket) -> dict:
    comments = [{"id": c.cid, "author": _person(c.author), "body": c.body, "created": _jira_time(c.when, c.author),
                 "updated": _jira_time(c.when, c.author)} for c in ticket.comments]
    return {
        "id": str(20000 + int(ticket.key.split("-")[1])),
        "key": ticket.key,
        "fields": {
            "summary": ticket.summary,
            "description": ticket.description,
            "reporter": _person(ticket.reporter),
            "assignee": _person(ticket.assignee),
            "status": {"name": ticket.status},
            "priority": {"name": ticket.priority},
            "labels": list(ticket.labels),
            "created": _jira_time(ticket.created, ticket.reporter),
            "updated": _jira_time(ticket.updated, ticket.reporter),
            "comment": {"startAt": 0, "maxResults": len(comments), "total": len(comments), "comments": comments},
        },
    }


def _timestamp(ms: int) -> str:
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"


def _vtt(meeting: Meeting) -> str:
    lines = ["WEBVTT", "", f"NOTE date: {meeting.day.isoformat()}", "", f"NOTE organiser: {meeting.organiser.name}", "",
             f"NOTE title: {meeting.title}", ""]
    clock = 2_000
    for speaker, text in meeting.cues:
        length = 1_500 + 380 * len(text.split())  # roughly speaking pace, so timings look plausible
        safe = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        lines += [f"{_timestamp(clock)} --> {_timestamp(clock + length)}", f"<v {speaker.name}>{safe}", ""]
        clock += length + 600
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.demo.synthetic_org",
                                     description="Write the synthetic organisation (mbox, Jira JSON, WebVTT, questions).")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--threads", type=int, default=36)
    parser.add_argument("--filler", type=float, default=1.0, help="scale of the everyday traffic (0 to 2)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        org = generate(args.out_dir, seed=args.seed, threads=args.threads, filler=args.filler)
    except ValueError as exc:
        parser.error(str(exc))
    for name, value in org.counts.items():
        print(f"{name}: {value}")
    print(f"written to {org.root} in {time.perf_counter() - started:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
