"""Everyday traffic around the decisions: status mails, newsletters, tickets and team syncs.

It shares vocabulary with the policies (expenses, on-call, travel, laptops) without stating any
policy value, so retrieval has to tell a decision from talk about the same subject.
"""

from __future__ import annotations

import random
from datetime import date, timedelta

from services.demo.cast import (
    ALL_HANDS,
    COMPANY,
    MONTHS,
    PEOPLE,
    TEAMS,
    human_date,
    members,
)
from services.demo.corpus import END, START, Corpus, business_day, work_time

PROJECTS = ("Harbor dashboard", "Tidewatch firmware", "billing migration", "Lighthouse analytics",
            "Pier API v2", "Anchor mobile app", "Gull data pipeline", "sensor calibration service")
CUSTOMERS = ("Bluefin Logistics", "Orchard Row Foods", "Meridian Tramways", "Saltmarsh Energy",
             "Copperleaf Clinics", "Northgate Ferries")
RISKS = ("no new risks", "waiting on a vendor quote", "two people out next week",
         "on-call load was heavy this week", "expense reports for the offsite are still missing",
         "travel bookings for the customer visit are pending approval", "laptop shipments are delayed")


def _progress(rng: random.Random, project: str) -> str:
    forms = (
        lambda: f"{project}: {rng.randint(2, 9)} of 10 milestones done",
        lambda: f"{project}: p95 latency down to {rng.randint(80, 400)} ms",
        lambda: f"{project}: {rng.randint(3, 40)} open bugs, {rng.randint(1, 20)} closed this week",
        lambda: f"{project}: migration {rng.randint(10, 95)} percent complete",
        lambda: f"{project}: demo for {rng.choice(CUSTOMERS)} went well",
    )
    return rng.choice(forms)()


def add_status_mail(corpus: Corpus, rng: random.Random, share: float = 1.0) -> None:
    """Fortnightly-ish status mail of six teams, or of the first `share` of them."""
    teams = ("platform", "engineering", "support", "sales", "it", "finance")
    for offset, team_key in enumerate(teams[: round(len(teams) * share)]):
        team = TEAMS[team_key]
        day = START + timedelta(days=7 + offset)
        while day <= END:
            author = rng.choice(members(team_key))
            lines = "\n".join(f"- {_progress(rng, p)}" for p in rng.sample(PROJECTS, k=rng.randint(2, 4)))
            body = (f"Hi all,\n\n{team.name} status for the week of {human_date(day)}:\n{lines}\n"
                    f"- Risks: {rng.choice(RISKS)}\n\nBest,\n{author.first}\n")
            mail = corpus.mail(work_time(rng, business_day(day), author), author, [(team.name, team.list_address)],
                               [("Leadership", TEAMS["leadership"].list_address)],
                               f"{team.name} status, week of {human_date(day)}", body)
            if rng.random() < 0.3:
                who = rng.choice(PEOPLE)
                note = rng.choice(("Thanks. Can we go through the risks in Thursday's sync?",
                                   "Nice progress. Who is covering on-call while people are out?",
                                   "Please loop me in on the vendor quote."))
                corpus.mail(work_time(rng, business_day(day + timedelta(days=1)), who), who,
                            [(author.name, author.email)], [(team.name, team.list_address)], "",
                            f"Hi {author.first},\n\n{note}\n\n{who.first}\n", parent=mail)
            day += timedelta(days=rng.choice((14, 21, 21, 28)))


def add_newsletters(corpus: Corpus, rng: random.Random) -> None:
    editor = next(p for p in PEOPLE if p.name == "Isla Murray")
    month = date(START.year, START.month, 1)
    n = 0
    while month <= END:
        label = f"{MONTHS[month.month - 1]} {month.year}"
        items = "".join(f"<li>{rng.choice(PROJECTS)}: {rng.choice(('shipped', 'in beta', 'kicked off'))}</li>"
                        for _ in range(3))
        html = (f"<html><body><h1>{COMPANY} digest: {label}</h1><p>Welcome to "
                f"{rng.randint(1, 5)} new colleagues this month.</p><ul>{items}</ul>"
                f"<p>Reminder: submit expense reports by the last working day of the month.</p></body></html>")
        day = business_day(month + timedelta(days=rng.randint(1, 6)))
        # One digest goes out as multipart/alternative, the rest as HTML only, as mail tools do.
        text = f"{COMPANY} digest: {label}\nSee the HTML version for details.\n" if n == 7 else ""
        corpus.mail(work_time(rng, day, editor), editor, [("All staff", ALL_HANDS)],
                    [(TEAMS["workplace"].name, TEAMS["workplace"].list_address)], f"{COMPANY} digest, {label}",
                    text, html=html)
        month = date(month.year + month.month // 12, month.month % 12 + 1, 1)
        n += 1


def add_announcements(corpus: Corpus, rng: random.Random, count: int = 60) -> None:
    subjects = (
        ("Lunch and learn: {p}", "Join us on Thursday for a short talk about the {p}. Snacks provided."),
        ("Customer visit from {c}", "{c} will visit the Lisbon office next week. Please keep meeting room 2 free."),
        ("Office maintenance on floor 2", "Facilities will replace the ceiling lights; expect some noise."),
        ("Reminder: expense reports due", "Please submit your expense reports before the month closes."),
        ("Travel booking portal maintenance", "The travel portal is offline on Saturday morning for an upgrade."),
        ("New laptop stock arrived", "IT received a batch of laptops; replacement requests are being scheduled."),
        ("On-call handover notes", "Handover notes for the {p} are in the runbook; nothing urgent open."),
        ("Fire drill", "There will be a fire drill at 11:00. Please leave by the nearest exit."),
    )
    for _ in range(count):
        author = rng.choice(PEOPLE)
        subject, body = rng.choice(subjects)
        p, c = rng.choice(PROJECTS), rng.choice(CUSTOMERS)
        day = business_day(START + timedelta(days=rng.randint(0, (END - START).days - 3)))
        corpus.mail(work_time(rng, day, author), author, [("All staff", ALL_HANDS)],
                    [(TEAMS[author.team].name, TEAMS[author.team].list_address)], subject.format(p=p, c=c),
                    f"Hi all,\n\n{body.format(p=p, c=c)}\n\n{author.first}\n")
    zoe = next(p for p in PEOPLE if p.name == "Zoë Ferreira")
    corpus.mail(work_time(rng, date(2025, 6, 12), zoe), zoe, [("Lisboa", ALL_HANDS)],
                [(TEAMS["people"].name, TEAMS["people"].list_address)],
                "Almoço de equipa em Lisboa",
                "Olá a todos,\n\nO almoço de equipa é na sexta-feira, às 13h, no café da esquina. "
                "Haverá pastéis de nata e limonada; avisem-me até quarta-feira.\n\nObrigada,\nZoë\n",
                charset="iso-8859-1")


def add_tickets(corpus: Corpus, rng: random.Random, count: int = 130) -> None:
    kinds = {
        "platform": ("{s} returns 502 under load", "{s} memory grows overnight", "{s} p99 latency regression",
                     "Disk usage at 85 percent on {s}", "Certificate for {s} expires soon", "Alerts flapping on {s}"),
        "engineering": ("Add export to CSV in the {p}", "Flaky test in the {p} suite", "Upgrade dependencies of the {p}",
                        "Dark mode for the {p}", "Refactor auth handling in the {p}"),
        "it": ("Laptop for a new joiner", "VPN drops on hotel wifi", "Printer on floor 2 jams",
               "Access request for the {p}", "Replace broken monitor", "Reset hardware key"),
        "support": ("{c} cannot export reports", "{c} asks for an invoice copy", "Sensor offline at {c}",
                    "{c} reports wrong timestamps in the {p}"),
    }
    services = ("ingest API", "billing worker", "sensor gateway", "search cluster", "auth service")
    notes = ("Looking into it.", "Reproduced on staging; fix in review.", "Deployed the fix, please confirm.",
             "Customer confirmed it works now.", "Closing as a duplicate of a known issue.", "Waiting on the vendor.",
             "Raised the priority: {n} customers affected.", "Added logs from last night's run.")
    for _ in range(count):
        team_key = rng.choice(tuple(kinds))
        people = members(team_key)
        reporter, assignee = rng.choice(PEOPLE), rng.choice(people + [None])
        summary = rng.choice(kinds[team_key]).format(s=rng.choice(services), p=rng.choice(PROJECTS),
                                                     c=rng.choice(CUSTOMERS))
        day = business_day(START + timedelta(days=rng.randint(0, (END - START).days - 20)))
        ticket = corpus.ticket(TEAMS[team_key].project, work_time(rng, day, reporter), reporter, assignee, summary,
                               f"{summary}. First noticed on {human_date(day)}; details and logs attached.",
                               status=rng.choice(("To Do", "In Progress", "Done", "Done", "Won't Do")),
                               priority=rng.choice(("Low", "Medium", "Medium", "High", "Highest")),
                               labels=tuple(rng.sample(("backend", "customer", "infra", "hardware", "ux"),
                                                       k=rng.randint(0, 2))))
        for i in range(rng.randint(0, 4)):
            who = assignee or rng.choice(people)
            when_day = business_day(day + timedelta(days=1 + 2 * i + rng.randint(0, 2)))
            corpus.comment(ticket, work_time(rng, when_day, who), who, rng.choice(notes).format(n=rng.randint(2, 9)))


def add_meetings(corpus: Corpus, rng: random.Random, count: int = 45) -> None:
    series = (("platform", "platform-weekly-sync"), ("engineering", "engineering-planning"),
              ("sales", "pipeline-review"), ("leadership", "leadership-sync"), ("support", "support-retro"))
    chatter = ("Quick round of updates, please.", "The {p} is on track for the end of the month.",
               "We had {n} incidents since the last sync, all minor.", "{c} asked for a roadmap call.",
               "I'll follow up on the vendor quote.", "Can someone take the action item on the runbook?",
               "Hiring: {n} interviews scheduled this week.", "Budget check-in is next Tuesday.")
    for _ in range(count):
        team_key, slug = rng.choice(series)
        people = members(team_key) + [rng.choice(PEOPLE)]
        organiser = people[0]
        day = business_day(START + timedelta(days=rng.randint(0, (END - START).days - 3)))
        cues = [(organiser, "Let's get started.")]
        cues += [(rng.choice(people), rng.choice(chatter).format(p=rng.choice(PROJECTS), c=rng.choice(CUSTOMERS),
                                                                  n=rng.randint(2, 6)))
                 for _ in range(rng.randint(5, 11))]
        cues.append((organiser, "Thanks, everyone. Notes will be on the wiki."))
        corpus.meeting(day, slug, slug.replace("-", " ").capitalize(), organiser, cues)
