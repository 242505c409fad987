"""Why a version was decided: a trigger, a recommendation that cites it, a decision that cites the
recommendation.

Organisations rarely change a rule out of nowhere. A survey, an audit finding, a cost review, an
incident or a pile of complaints comes first (the trigger); someone who owns the rule writes a
recommendation that names the trigger by its subject and date; the decision then names the
recommendation. Each artefact refers only to the one before it, so answering "why did this
change" means following the chain back, not finding one document.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, timedelta

from services.demo.cast import PEOPLE, TEAMS, Person, Topic, human_date, members, sentence
from services.demo.corpus import Corpus, Doc, Ticket, business_day, work_time

# kind -> (channel, subject, body); the body never states a value of the rule.
TRIGGERS: dict[str, tuple[str, str, str]] = {
    "survey": ("email", "Survey results: {title}",
               "The quarterly staff survey is in: {n} percent of the {m} respondents asked us to revisit the {title}. "
               "The free-text comments are in the survey folder."),
    "audit": ("jira", "Audit finding: {title}",
              "The external audit flagged the {title} as out of line with what our customer contracts promise "
              "(finding {n}). It needs an owner and a plan within a month."),
    "cost": ("email", "Cost review: {title}",
             "Spend tied to the {title} ran {n} percent over plan last quarter. Finance asks the owners to look at "
             "the rule before the next budget round."),
    "incident": ("jira", "Incident follow-up: {title}",
                 "The review of last week's incident found that the {title} slowed the response; {m} people were "
                 "involved and the customer noticed. Action item: revisit the rule."),
    "complaints": ("jira", "Complaints about the {title}",
                   "We logged {n} complaints this month about the {title}; most say the current rule does not fit "
                   "how teams actually work."),
}


@dataclass(eq=False)
class Justification:
    trigger_kind: str
    trigger_day: date
    trigger_author: Person
    advice_day: date
    advice_author: Person
    advice_channel: str  # email | meeting | jira
    trigger_doc: Doc | None = None
    advice_doc: Doc | None = None
    trigger_subject: str = ""
    advice_title: str = ""

    @property
    def docs(self) -> list[Doc]:
        """The chain behind the decision, nearest first: the recommendation, then its trigger."""
        return [self.advice_doc, self.trigger_doc]


def plan_justification(rng: random.Random, topic: Topic, day: date, after: date, decider: Person,
                       pool: list[Person]) -> Justification | None:
    """A trigger two to four weeks before the decision of `day` and a recommendation in the week
    before it, both after the previous version (`after`); None when they do not fit."""
    trigger_day = business_day(day - timedelta(days=rng.randint(16, 30)))
    advice_day = business_day(day - timedelta(days=rng.randint(4, 10)))
    if trigger_day <= after + timedelta(days=2) or not trigger_day + timedelta(days=2) < advice_day < day:
        return None
    kind = rng.choice(sorted(TRIGGERS))
    reporter = rng.choice([p for p in PEOPLE if p is not decider])
    adviser = rng.choice([p for p in pool if p is not decider])
    channel = rng.choice(["email", "email", "meeting", "jira"])
    return Justification(kind, trigger_day, reporter, advice_day, adviser, channel)


def citation(why: Justification) -> str:
    """How the decision names its recommendation."""
    return (f"This follows the recommendation {why.advice_author.name} made on {human_date(why.advice_day)} "
            f"({why.advice_title}).")


def render_trigger(why: Justification, topic: Topic, corpus: Corpus, rng: random.Random) -> None:
    channel, subject, body = TRIGGERS[why.trigger_kind]
    why.trigger_subject = subject.format(title=topic.title)
    text = body.format(title=topic.title, n=rng.randint(12, 64), m=rng.randint(3, 180))
    when = work_time(rng, why.trigger_day, why.trigger_author)
    team = TEAMS[why.trigger_author.team]
    if channel == "jira":
        why.trigger_doc = corpus.ticket(team.project, when, why.trigger_author, rng.choice(members(topic.team)),
                                        why.trigger_subject, text, status="Done", priority="High",
                                        labels=(why.trigger_kind,))
        return
    owner = TEAMS[topic.team]
    why.trigger_doc = corpus.mail(when, why.trigger_author, [(owner.name, owner.list_address)],
                                  [(team.name, team.list_address)], why.trigger_subject,
                                  f"Hi all,\n\n{text}\n\n{why.trigger_author.first}\n")


def render_advice(why: Justification, topic: Topic, value: str, decider: Person, corpus: Corpus,
                  rng: random.Random, ticket: Ticket | None) -> None:
    source = f"'{why.trigger_subject}' ({why.trigger_author.name}, {human_date(why.trigger_day)})"
    advice = (f"Recommendation on the {topic.title}: after {source}, I recommend that {topic.says(value)}. "
              f"{decider.first}, this needs your decision.")
    adviser = why.advice_author
    when = work_time(rng, why.advice_day, adviser)
    if why.advice_channel == "jira" and ticket is not None:
        why.advice_title = f"comment on the ticket '{ticket.summary}'"
        why.advice_doc = corpus.comment(ticket, when, adviser, advice)
        return
    if why.advice_channel == "meeting":
        why.advice_title = f"{sentence(topic.title)} working group"
        others = rng.sample([p for p in members(topic.team) + members("leadership") if p is not adviser], k=2)
        cues = [(adviser, f"The one item today is the {topic.title}."), (adviser, advice),
                (others[0], "That matches what I hear from my team."), (others[1], "Agreed, let's send it up.")]
        why.advice_doc = corpus.meeting(why.advice_day, f"{topic.key}-working-group", why.advice_title, adviser, cues)
        return
    why.advice_title = f"Proposal: {topic.title}"
    why.advice_doc = corpus.mail(when, adviser, [(decider.name, decider.email)],
                                 [(TEAMS[topic.team].name, TEAMS[topic.team].list_address)], why.advice_title,
                                 f"Hi {decider.first},\n\n{advice}\n\nBest,\n{adviser.first}\n")
