"""Talk around a decision: questions, suggestions, reminders, and restatements of a replaced rule.

Most of what an organisation writes about a rule does not decide it. People ask whether it applies
to them, wish it were different, point at the handbook, or repeat the rule they remember after it
has changed. These documents name the rule and often a value, so retrieval has to tell the
decision in force from the talk around it.
"""

from __future__ import annotations

import random
from datetime import date, timedelta

from services.demo.cast import PEOPLE, TEAMS, Topic, sentence
from services.demo.corpus import END, START, Corpus, Doc, Ticket, business_day, work_time

_TALK = (
    "Quick question about the {title}: does it also apply to contractors and interns?",
    "Our team would find it easier if {wish}. Just a thought for the next review, not a request to change it now.",
    "Reminder: the {title} is in the handbook; please check there before asking in the channel.",
    "Has anyone compared the {title} with what other companies do? I heard that at some of them {wish}.",
    "Is the {title} on the agenda of the next all-hands? A few people asked me about it.",
    "Where is the {title} written down? The wiki page I found looks out of date.",
)

_STALE = (
    ("Notes for new joiners", "A few reminders for this month's new joiners: {rule}; expense reports are due on the "
     "last working day of the month; the handbook has the rest."),
    ("Team FAQ, updated", "I refreshed our team FAQ. The question we get most: {rule}. Ping me if anything is unclear."),
)


def add_talk(topic: Topic, days: list[date], corpus: Corpus, rng: random.Random, ticket: Ticket | None) -> list[Doc]:
    """Up to two messages around each decision day (`days`), none of which decides anything."""
    docs: list[Doc] = []
    for decided in days:
        for _ in range(rng.randint(0, 2)):
            day = business_day(decided + timedelta(days=rng.randint(-15, 25)))
            if not START <= day <= END:
                continue
            person = rng.choice(PEOPLE)
            text = rng.choice(_TALK).format(title=topic.title, wish=topic.says(rng.choice(topic.values)))
            when = work_time(rng, day, person)
            if ticket is not None and when > ticket.created and rng.random() < 0.4:
                docs.append(corpus.comment(ticket, when, person, text))
                continue
            team = TEAMS[person.team]
            docs.append(corpus.mail(when, person, [(team.name, team.list_address)], [(person.name, person.email)],
                                    f"{sentence(topic.title)}?", f"Hi all,\n\n{text}\n\n{person.first}\n"))
    return docs


def render_stale(topic: Topic, statement, corpus: Corpus, rng: random.Random) -> None:
    """A restatement of a replaced rule, written as if it still held (`statement.value`)."""
    author = statement.author
    team = TEAMS[author.team]
    subject, text = rng.choice(_STALE)
    statement.doc = corpus.mail(work_time(rng, statement.day, author), author, [(team.name, team.list_address)],
                                [(author.name, author.email)], subject,
                                f"Hi all,\n\n{text.format(rule=topic.says(statement.value))}\n\n{author.first}\n")
