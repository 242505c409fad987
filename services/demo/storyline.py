"""Decision threads: a policy value set, revised by someone else, reversed later, sometimes
contradicted by another team, restated after it was replaced, or corrected weeks after the fact;
a change is often justified by a chain of earlier artefacts (`services.demo.chains`).

`plan_thread` decides what happens and when (pure, from a seeded Random); `render_thread`
writes it into a Corpus as mails, ticket comments and meetings. Values are always spelled
out in the text, so an as-of answer visibly changes along the timeline.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import date, timedelta
from itertools import pairwise

from services.demo.cast import (
    ALL_HANDS,
    PEOPLE,
    TEAMS,
    Person,
    Topic,
    human_date,
    members,
    sentence,
)
from services.demo.chains import Justification, citation, plan_justification, render_advice, render_trigger
from services.demo.corpus import (
    END,
    START,
    Corpus,
    Doc,
    Mail,
    Ticket,
    business_day,
    work_time,
)
from services.demo.talk import add_talk, render_stale

MIN_GAP_DAYS = 45  # between two versions of one policy
MARGIN_DAYS = 3  # an asked date keeps this far from any version, so day-granular dates are unambiguous


@dataclass(eq=False)
class Version:
    action: str  # set | revise | reverse | revise-again
    day: date
    author: Person
    channel: str  # email | jira | meeting
    value: str  # what holds (after any correction is known)
    stated: str  # what the document itself says
    html: bool = False
    doc: Doc | None = None
    because: Justification | None = None


@dataclass(eq=False)
class Correction:
    day: date
    author: Person
    channel: str
    version: Version
    doc: Doc | None = None


@dataclass(eq=False)
class Contradiction:
    day: date
    author: Person
    channel: str
    value: str
    doc: Doc | None = None
    stale: bool = False  # repeats a replaced rule, unaware of the change (else: another team's assumption)


@dataclass(eq=False)
class DecisionThread:
    topic: Topic
    versions: list[Version]
    correction: Correction | None = None
    contradiction: Contradiction | None = None
    stale: Contradiction | None = None
    proposal_day: date | None = None
    chatter: list[Doc] = field(default_factory=list)

    def boundaries(self) -> list[date]:
        days = [v.day for v in self.versions]
        if self.correction:
            days.append(self.correction.day)
        return sorted(days)

    def holding(self, day: date) -> tuple[list[Doc], str, Version]:
        """The documents that state the policy in force at the start of `day`, and its value."""
        current = [v for v in self.versions if v.day < day][-1]
        fix = self.correction
        if fix and fix.version is current and fix.day < day:
            return [current.doc, fix.doc], current.value, current
        return [current.doc], current.stated, current

    def superseded_by(self, version: Version) -> list[Version]:
        """The versions a version replaced: every earlier one of the thread."""
        return self.versions[: self.versions.index(version)]

    def statements(self) -> list[Contradiction]:
        """Statements that disagree with the rule in force when they were made."""
        return [s for s in (self.contradiction, self.stale) if s is not None]


def _pick(rng: random.Random, pool: list[Person], *exclude: Person) -> Person:
    return rng.choice([p for p in pool if p not in exclude])


def _version_days(rng: random.Random, n: int) -> list[date]:
    first = START.toordinal() + 10 + rng.randint(0, 170)
    last = END.toordinal() - 25
    for _ in range(500):
        rest = sorted(rng.randint(first + MIN_GAP_DAYS, last) for _ in range(n - 1))
        days = [first, *rest]
        if all(b - a >= MIN_GAP_DAYS for a, b in pairwise(days)):
            break
    else:  # evenly spaced is always feasible for n <= 4 with these bounds
        step = (last - first) // (n - 1)
        days = [first + i * step for i in range(n)]
    return [business_day(date.fromordinal(d)) for d in days]


def plan_thread(topic: Topic, rng: random.Random, *, corrected: bool, contradicted: bool, html: bool) -> DecisionThread:
    n = 4 if rng.random() < 0.3 else 3
    days = _version_days(rng, n)
    owners = members(topic.team)
    pool = owners + members("leadership")
    a = rng.choice(owners)
    b = _pick(rng, pool, a)
    c = _pick(rng, pool, a, b)
    authors = [a, b, c, _pick(rng, pool, c)]
    v0 = rng.choice(topic.values)
    v1 = rng.choice([v for v in topic.values if v != v0])
    later = [v for v in topic.values if v not in (v0, v1)] or [v1]
    values = [v0, v1, v0, rng.choice(later)]
    actions = ["set", "revise", "reverse", "revise-again"]
    channels = [rng.choice(["email", "email", "email", "meeting"])]
    channels += [rng.choice(["email", "email", "jira", "meeting"]) for _ in range(n - 1)]
    if html:
        channels[2] = "email"
    versions = [Version(actions[i], days[i], authors[i], channels[i], values[i], values[i], html and i == 2)
                for i in range(n)]
    thread = DecisionThread(topic, versions)
    proposal_day = business_day(days[0] - timedelta(days=rng.randint(6, 20)))
    if rng.random() < 0.5 and START <= proposal_day < days[0]:
        thread.proposal_day = proposal_day
    if corrected:
        thread.correction = _plan_correction(rng, thread, pool)
    if contradicted:
        thread.contradiction = _plan_contradiction(rng, thread)
    for before, version in pairwise(versions):
        if rng.random() < 0.55:
            version.because = plan_justification(rng, topic, version.day, before.day, version.author, pool)
    if rng.random() < 0.45:
        thread.stale = _plan_stale(rng, thread)
    return thread


def _plan_correction(rng: random.Random, thread: DecisionThread, pool: list[Person]) -> Correction | None:
    versions = thread.versions
    for k in rng.sample(range(min(2, len(versions))), k=min(2, len(versions))):
        version = versions[k]
        limit = versions[k + 1].day if k + 1 < len(versions) else END
        day = business_day(version.day + timedelta(days=rng.randint(14, 42)))
        if (limit - day).days < 2 * MARGIN_DAYS + 1:
            continue
        neighbours = {versions[i].value for i in (k - 1, k + 1) if 0 <= i < len(versions)}
        wrong = [v for v in thread.topic.values if v != version.value and v not in neighbours]
        if not wrong:
            continue
        version.stated = rng.choice(wrong)
        author = version.author if rng.random() < 0.7 else _pick(rng, pool, version.author)
        channel = "email" if version.channel == "email" else rng.choice(["email", "jira"])
        return Correction(day, author, channel, version)
    return None


def _plan_contradiction(rng: random.Random, thread: DecisionThread) -> Contradiction | None:
    outsiders = [p for p in PEOPLE if p.team not in (thread.topic.team, "leadership")]
    busy = thread.boundaries()
    late = rng.random() < 0.5  # after the last version, so "the latest message" is the wrong answer
    lo = busy[-1] if late else busy[0]
    for _ in range(50):
        day = business_day(lo + timedelta(days=rng.randint(4, max(5, (END - lo).days - 5))))
        if day <= END and all(abs((day - b).days) > 2 for b in busy):
            break
    else:
        return None
    _, stated, current = thread.holding(day)
    value = rng.choice([v for v in thread.topic.values if v not in (stated, current.value)])
    return Contradiction(day, rng.choice(outsiders), rng.choice(["email", "jira"]), value)


def _plan_stale(rng: random.Random, thread: DecisionThread) -> Contradiction | None:
    """Someone repeats the rule a version replaced, a few weeks after the change."""
    versions, busy = thread.versions, thread.boundaries()
    k = rng.randrange(1, len(versions))
    limit = versions[k + 1].day if k + 1 < len(versions) else END
    day = business_day(versions[k].day + timedelta(days=rng.randint(6, 35)))
    if (limit - day).days < MARGIN_DAYS + 2 or any(abs((day - b).days) <= 2 for b in busy):
        return None
    old = versions[k - 1].value
    _, stated, current = thread.holding(day)
    if old in (stated, current.value):
        return None
    author = rng.choice([p for p in PEOPLE if p is not versions[k].author])
    return Contradiction(day, author, "email", old, stale=True)


# --- rendering ----------------------------------------------------------------------------

_ACKS = (
    "Thanks, noted. I'll update the handbook page today.",
    "Got it. I'll pass this on to my team in Monday's sync.",
    "Does this also apply to contractors, or only to employees?",
    "Thanks for the clear write-up.",
    "Could we add this to the onboarding checklist?",
    "Noted. I'll make sure the internal FAQ reflects it.",
    "Is there an exception process for edge cases? Happy to discuss offline.",
)
_REASONS = (
    "This follows the feedback from the last quarterly survey.",
    "We compared notes with two peer companies before settling on this.",
    "The leadership team reviewed the cost impact last week.",
    "This keeps us in line with what we promised customers in the last audit.",
    "It is simpler to explain and easier to check.",
)
_DISCUSS = (
    "The current rule is causing friction for a few teams.",
    "I'd like us to keep this simple and easy to explain to new joiners.",
    "Finance is fine with whatever we agree, as long as it is written down.",
    "We had three questions about this in the last all-hands.",
    "Let's make sure the handbook and the ticket say the same thing.",
    "I checked with the team leads; nobody objected in principle.",
)
_AGREE = ("Agreed.", "Works for me.", "Fine by me, thanks.", "Sounds good.")


def _decision_line(thread: DecisionThread, v: Version) -> str:
    topic = thread.topic
    earlier = thread.versions[thread.versions.index(v) - 1] if v.action != "set" else None
    rule = topic.says(v.stated)
    if v.action == "set":
        return f"Decision on the {topic.title}: {rule}, effective immediately."
    if v.action == "revise":
        return (f"We are changing the {topic.title}: from now on {rule}. "
                f"This replaces the rule announced on {human_date(earlier.day)}.")
    if v.action == "reverse":
        return (f"We are reversing the change announced on {human_date(earlier.day)}. "
                f"The {topic.title} goes back to the earlier rule: {rule}.")
    return f"Following the review, the {topic.title} changes again: {rule}. This replaces the rule of {human_date(earlier.day)}."


def _team_recipients(topic: Topic) -> tuple[list, list]:
    team = TEAMS[topic.team]
    return [("All staff", ALL_HANDS)], [(team.name, team.list_address)]


def _sign(person: Person) -> str:
    return f"Best,\n{person.first}"


def render_thread(thread: DecisionThread, corpus: Corpus, rng: random.Random) -> None:
    topic = thread.topic
    subject = sentence(topic.title)
    to, cc = _team_recipients(topic)
    tail: Mail | None = None
    owners = members(topic.team)
    if thread.proposal_day:
        author = rng.choice(owners)
        options = ", ".join(rng.sample(topic.values, k=min(3, len(topic.values))))
        body = (f"Hi all,\n\nI'd like us to settle the {topic.title}. Options on the table: {options}.\n"
                f"Please send concerns by the end of the week; the decision will follow shortly.\n\n{_sign(author)}\n")
        tail = corpus.mail(work_time(rng, thread.proposal_day, author), author, to, cc, subject, body)
        thread.chatter.append(tail)
    ticket: Ticket | None = None
    events: list[tuple[date, int, object]] = [(v.day, 0, v) for v in thread.versions]
    if thread.correction:
        events.append((thread.correction.day, 1, thread.correction))
    if thread.contradiction:
        events.append((thread.contradiction.day, 2, thread.contradiction))
    if thread.stale:
        events.append((thread.stale.day, 2, thread.stale))
    for v in thread.versions:
        if v.because:
            events += [(v.because.trigger_day, 4, ("trigger", v)), (v.because.advice_day, 5, ("advice", v))]
    ticket_day = business_day(thread.versions[0].day + timedelta(days=rng.randint(1, 4)))
    events.append((ticket_day, 3, "ticket"))
    for _day, _order, event in sorted(events, key=lambda e: (e[0], e[1])):
        if event == "ticket":
            reporter = thread.versions[0].author
            ticket = corpus.ticket(
                "POL", work_time(rng, ticket_day, reporter), reporter, rng.choice(owners), f"Policy: {subject}",
                f"Tracking ticket for the {topic.title}. Decisions and later changes are recorded in the comments "
                f"or in the announcement thread on the mailing list.",
                status=rng.choice(["Done", "Done", "In Progress"]), priority=rng.choice(["Medium", "High"]),
                labels=("policy", topic.key))
            note = corpus.comment(ticket, work_time(rng, ticket_day + timedelta(days=rng.randint(1, 6)),
                                                    ticket.assignee), ticket.assignee,
                                  "Handbook page drafted; linked the announcement thread.")
            thread.chatter.append(note)
        elif isinstance(event, Version):
            tail = _render_version(thread, event, corpus, rng, tail, ticket)
        elif isinstance(event, Correction):
            _render_correction(thread, event, corpus, rng, tail, ticket)
        elif isinstance(event, Contradiction):
            if event.stale:
                render_stale(topic, event, corpus, rng)
            else:
                _render_contradiction(thread, event, corpus, rng)
        elif event[0] == "trigger":
            render_trigger(event[1].because, topic, corpus, rng)
        else:
            v = event[1]
            render_advice(v.because, topic, v.value, v.author, corpus, rng, ticket)
    thread.chatter += add_talk(topic, [v.day for v in thread.versions], corpus, rng, ticket)


def _render_version(thread, v: Version, corpus: Corpus, rng, tail: Mail | None, ticket: Ticket | None) -> Mail | None:
    topic, line = thread.topic, _decision_line(thread, v)
    when = work_time(rng, v.day, v.author)
    reason = citation(v.because) if v.because else rng.choice(_REASONS)
    if v.channel == "jira" and ticket is not None:
        v.doc = corpus.comment(ticket, when, v.author, f"Decision recorded here. {line} {reason}")
        return tail
    if v.channel == "meeting":
        attendees = rng.sample([p for p in members(topic.team) + members("leadership") if p != v.author], k=3)
        cues = [(v.author, f"Thanks for joining. The main item today is the {topic.title}.")]
        cues += [(p, rng.choice(_DISCUSS)) for p in attendees[: rng.randint(2, 3)]]
        cues.append((v.author, f"{line} {reason if v.because else 'That is what goes into the handbook.'}"))
        cues += [(p, rng.choice(_AGREE)) for p in attendees[:2]]
        cues.append((v.author, "I'll log it on the policy ticket. Thanks, everyone."))
        v.doc = corpus.meeting(v.day, f"{topic.key}-review", f"{sentence(topic.title)} review", v.author, cues)
        return tail
    to, cc = _team_recipients(topic)
    body = f"Hi all,\n\n{line}\n\n{reason}\n\n{_sign(v.author)}\n"
    html = None
    if v.html:
        html = (f"<html><body><p>Hi all,</p><p><b>{line}</b></p><p>{reason}</p>"
                f"<p>Best,<br>{v.author.first}</p></body></html>")
        body = ""
    subject = sentence(topic.title) if v.action != "reverse" else f"Reversal: {topic.title}"
    parent = tail if v.action != "reverse" or rng.random() < 0.5 else None
    mail = corpus.mail(when, v.author, to, cc, subject, body, parent=parent, html=html)
    v.doc = mail
    for _ in range(rng.randint(0, 2)):
        person = rng.choice(PEOPLE)
        day = business_day(v.day + timedelta(days=rng.randint(1, 4)))
        ack = corpus.mail(work_time(rng, day, person), person, [(v.author.name, v.author.email)], to,
                          "", f"Hi {v.author.first},\n\n{rng.choice(_ACKS)}\n\n{person.first}\n", parent=mail)
        thread.chatter.append(ack)
    return mail


def _render_correction(thread, fix: Correction, corpus: Corpus, rng, tail: Mail | None, ticket: Ticket | None) -> None:
    topic, v = thread.topic, fix.version
    whose = "My note" if fix.author is v.author else "The note"
    text = (f"Correction: the {topic.title} agreed on {human_date(v.day)} was {v.value}, not {v.stated}. "
            f"{whose} from that day had the wrong figure; {topic.says(v.value)}.")
    when = work_time(rng, fix.day, fix.author)
    if fix.channel == "jira" and ticket is not None:
        fix.doc = corpus.comment(ticket, when, fix.author, text)
        return
    to, cc = _team_recipients(topic)
    parent = v.doc if isinstance(v.doc, Mail) else tail
    fix.doc = corpus.mail(when, fix.author, to, cc, f"Correction: {topic.title}",
                          f"Hi all,\n\n{text}\n\nApologies for the confusion.\n{fix.author.first}\n", parent=parent)


def _render_contradiction(thread, c: Contradiction, corpus: Corpus, rng) -> None:
    topic, team = thread.topic, TEAMS[c.author.team]
    owner = TEAMS[topic.team].name
    text = (f"Quick heads-up from {team.name}: we have been telling people that {topic.says(c.value)}. "
            f"That is our team's working assumption, not an official decision; {owner} owns the "
            f"{topic.title}, so treat this as unconfirmed until they say otherwise.")
    when = work_time(rng, c.day, c.author)
    if c.channel == "jira":
        c.doc = corpus.ticket(team.project, when, c.author, None, f"Question about the {topic.title}", text,
                              status="To Do", priority="Low", labels=("question",))
        return
    c.doc = corpus.mail(when, c.author, [(team.name, team.list_address)], [(c.author.name, c.author.email)],
                        f"{sentence(topic.title)}: what we tell people", f"Hi team,\n\n{text}\n\n{c.author.first}\n")

