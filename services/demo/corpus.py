"""The generated documents before they become files: mails, tickets, comments and meetings.

The storyline and the filler create these objects; ids (Message-ID, Jira key, comment id,
meeting file stem) are assigned once everything exists, in date order, so that they look like
ids a real system hands out and so questions can point at documents before ids are known.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone

from services.demo.cast import Person

START = date(2025, 1, 1)
END = date(2026, 6, 30)

Recipient = tuple[str, str]  # (display name, address)


def business_day(day: date) -> date:
    """Moves a weekend day to the following Monday."""
    while day.weekday() >= 5:
        day += timedelta(days=1)
    return day


def work_time(rng: random.Random, day: date, person: Person) -> datetime:
    """A UTC instant during the person's local office hours on that (local) day."""
    local = datetime(day.year, day.month, day.day, rng.randint(8, 17), rng.choice((0, 5, 10, 15, 20, 30, 40, 45, 50)))
    return (local - timedelta(hours=person.utc_offset_h)).replace(tzinfo=UTC)


def local_time(when: datetime, person: Person) -> datetime:
    return when.astimezone(timezone(timedelta(hours=person.utc_offset_h)))


@dataclass(eq=False)
class Mail:
    when: datetime
    author: Person
    to: tuple[Recipient, ...]
    cc: tuple[Recipient, ...]
    subject: str
    body: str  # text/plain; empty for an HTML-only message
    parent: Mail | None = None
    html: str | None = None
    charset: str = "utf-8"
    msg_id: str = ""

    @property
    def source_id(self) -> str:
        return self.msg_id


@dataclass(eq=False)
class Ticket:
    project: str
    created: datetime
    reporter: Person
    assignee: Person | None
    summary: str
    description: str
    status: str
    priority: str
    labels: tuple[str, ...]
    comments: list[Comment] = field(default_factory=list)
    key: str = ""

    @property
    def source_id(self) -> str:
        return self.key

    @property
    def updated(self) -> datetime:
        return max([self.created, *(c.when for c in self.comments)])


@dataclass(eq=False)
class Comment:
    ticket: Ticket
    when: datetime
    author: Person
    body: str
    cid: str = ""

    @property
    def source_id(self) -> str:
        return f"{self.ticket.key}#comment-{self.cid}"


@dataclass(eq=False)
class Meeting:
    day: date
    slug: str
    title: str
    organiser: Person
    cues: list[tuple[Person, str]]
    stem: str = ""

    @property
    def when(self) -> datetime:
        return datetime(self.day.year, self.day.month, self.day.day, tzinfo=UTC)

    @property
    def source_id(self) -> str:
        return self.stem


Doc = Mail | Ticket | Comment | Meeting

SOURCE_OF = {Mail: "email", Ticket: "jira", Comment: "jira", Meeting: "meeting"}


def doc_ref(doc: Doc) -> dict[str, str]:
    """The (source, source_id) pair the connectors derive for this document."""
    return {"source": SOURCE_OF[type(doc)], "source_id": doc.source_id}


def doc_author(doc: Doc) -> Person:
    if isinstance(doc, Ticket):
        return doc.reporter
    if isinstance(doc, Meeting):
        return doc.organiser
    return doc.author


def doc_time(doc: Doc) -> datetime:
    return doc.created if isinstance(doc, Ticket) else doc.when


@dataclass
class Corpus:
    mails: list[Mail] = field(default_factory=list)
    tickets: list[Ticket] = field(default_factory=list)
    meetings: list[Meeting] = field(default_factory=list)

    def mail(self, when: datetime, author: Person, to, cc, subject: str, body: str, *,
             parent: Mail | None = None, html: str | None = None, charset: str = "utf-8") -> Mail:
        if parent is not None:
            # A reply always follows the message it answers.
            when = max(when, parent.when + timedelta(minutes=37))
            root = parent.subject[4:] if parent.subject.startswith("Re: ") else parent.subject
            subject = "Re: " + root
        mail = Mail(when, author, tuple(to), tuple(cc), subject, body, parent, html, charset)
        self.mails.append(mail)
        return mail

    def ticket(self, project: str, created: datetime, reporter: Person, assignee: Person | None, summary: str,
               description: str, *, status: str = "Done", priority: str = "Medium",
               labels: tuple[str, ...] = ()) -> Ticket:
        ticket = Ticket(project, created, reporter, assignee, summary, description, status, priority, labels)
        self.tickets.append(ticket)
        return ticket

    def comment(self, ticket: Ticket, when: datetime, author: Person, body: str) -> Comment:
        comment = Comment(ticket, max(when, ticket.created + timedelta(minutes=23)), author, body)
        ticket.comments.append(comment)
        return comment

    def meeting(self, day: date, slug: str, title: str, organiser: Person, cues: list[tuple[Person, str]]) -> Meeting:
        meeting = Meeting(day, slug, title, organiser, cues)
        self.meetings.append(meeting)
        return meeting

    def assign_ids(self, domain: str) -> None:
        """Hands out ids in date order, as a mail server, Jira and a recorder would."""
        for n, mail in enumerate(sorted(self.mails, key=lambda m: m.when), start=1):
            mail.msg_id = f"{mail.when:%Y%m%d%H%M}.{n:04d}.kb@mail.{domain}"
        numbers: dict[str, int] = {}
        for ticket in sorted(self.tickets, key=lambda t: t.created):
            numbers[ticket.project] = numbers.get(ticket.project, 100) + 1
            ticket.key = f"{ticket.project}-{numbers[ticket.project]}"
        comments = sorted((c for t in self.tickets for c in t.comments), key=lambda c: c.when)
        for n, comment in enumerate(comments, start=10001):
            comment.cid = str(n)
        for ticket in self.tickets:
            ticket.comments.sort(key=lambda c: c.when)
        stems: set[str] = set()
        for meeting in sorted(self.meetings, key=lambda m: (m.day, m.slug)):
            stem, n = f"{meeting.day.isoformat()}-{meeting.slug}", 1
            while stem in stems:
                n += 1
                stem = f"{meeting.day.isoformat()}-{meeting.slug}-{n}"
            stems.add(stem)
            meeting.stem = stem
