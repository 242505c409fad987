"""The fictional company behind the synthetic organisation: its people, teams and policy topics.

Everything here is invented for orgmem. Addresses use the reserved `.example` domain so no
generated message can ever point at a real mailbox.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

COMPANY = "Kestrel Bay Instruments"
DOMAIN = "kestrelbay.example"


@dataclass(frozen=True)
class Team:
    key: str
    name: str
    project: str  # Jira project key for the team's own tickets
    list_address: str


@dataclass(frozen=True)
class Person:
    name: str
    team: str
    utc_offset_h: int  # fixed office offsets (no zoneinfo), so output never depends on tz data

    @property
    def email(self) -> str:
        ascii_name = unicodedata.normalize("NFKD", self.name).encode("ascii", "ignore").decode()
        return ascii_name.lower().replace(" ", ".") + "@" + DOMAIN

    @property
    def first(self) -> str:
        return self.name.split()[0]


TEAMS: dict[str, Team] = {
    t.key: t
    for t in (
        Team("leadership", "Leadership", "EXEC", f"leadership@{DOMAIN}"),
        Team("people", "People Ops", "HR", f"people-ops@{DOMAIN}"),
        Team("finance", "Finance", "FIN", f"finance@{DOMAIN}"),
        Team("platform", "Platform", "OPS", f"platform@{DOMAIN}"),
        Team("security", "Security", "SEC", f"security@{DOMAIN}"),
        Team("it", "IT", "IT", f"it@{DOMAIN}"),
        Team("legal", "Legal", "LEG", f"legal@{DOMAIN}"),
        Team("engineering", "Engineering", "ENG", f"engineering@{DOMAIN}"),
        Team("workplace", "Workplace", "WRK", f"workplace@{DOMAIN}"),
        Team("sales", "Sales", "SAL", f"sales@{DOMAIN}"),
        Team("support", "Customer Support", "SUP", f"support@{DOMAIN}"),
    )
}
ALL_HANDS = f"all@{DOMAIN}"

LISBON, BERLIN, TORONTO = 0, 1, -5

PEOPLE: tuple[Person, ...] = (
    Person("Helena Marsh", "leadership", LISBON),
    Person("Tomasz Wierzbicki", "leadership", BERLIN),
    Person("Adaeze Okonkwo", "leadership", LISBON),
    Person("Rafael Quintero", "leadership", TORONTO),
    Person("Maya Lindqvist", "people", BERLIN),
    Person("Jonah Abernethy", "people", TORONTO),
    Person("Priya Raman", "people", LISBON),
    Person("Zoë Ferreira", "people", LISBON),
    Person("Oskar Brandt", "finance", BERLIN),
    Person("Lucía Serrano", "finance", LISBON),
    Person("Kwame Mensah", "finance", TORONTO),
    Person("Ines Duarte", "platform", LISBON),
    Person("Declan Foyle", "platform", TORONTO),
    Person("Mei Tanaka", "platform", BERLIN),
    Person("Arjun Pillai", "platform", LISBON),
    Person("Sigrid Halvorsen", "security", BERLIN),
    Person("Malik Haddad", "security", TORONTO),
    Person("Nora Kessler", "security", BERLIN),
    Person("Callum Reid", "it", LISBON),
    Person("Femi Adeyemi", "it", TORONTO),
    Person("Ana Sobral", "it", LISBON),
    Person("Beatrix Lowe", "legal", TORONTO),
    Person("Hugo Marchetti", "legal", BERLIN),
    Person("Yara Nasser", "legal", LISBON),
    Person("Elif Demir", "engineering", BERLIN),
    Person("Samuel Osei", "engineering", LISBON),
    Person("Keiko Mori", "engineering", TORONTO),
    Person("Finn Gallagher", "engineering", LISBON),
    Person("Greta Vogel", "workplace", BERLIN),
    Person("Luca Bianchi", "workplace", LISBON),
    Person("Isla Murray", "workplace", TORONTO),
    Person("Dmitri Volkov", "sales", TORONTO),
    Person("Chloe Martin", "sales", LISBON),
    Person("Tariq Aziz", "sales", BERLIN),
    Person("Hannah Weiss", "support", BERLIN),
    Person("Pedro Cardoso", "support", LISBON),
    Person("Amara Eze", "support", TORONTO),
)


def members(team: str) -> list[Person]:
    return [p for p in PEOPLE if p.team == team]


@dataclass(frozen=True)
class Topic:
    """A policy whose value changes over the timeline. `rule` holds one `{v}` placeholder."""

    key: str
    title: str
    team: str
    rule: str
    values: tuple[str, ...]

    def says(self, value: str) -> str:
        return self.rule.format(v=value)


def _t(key: str, title: str, team: str, rule: str, *values: str) -> Topic:
    return Topic(key, title, team, rule, values)


TOPICS: tuple[Topic, ...] = (
    _t("remote-work-allowance", "remote work allowance", "people", "staff may work remotely up to {v}",
       "1 day per week", "2 days per week", "3 days per week", "4 days per week"),
    _t("meal-expense-limit", "daily meal expense limit", "finance", "meals on business trips are reimbursed up to {v}",
       "40 EUR per day", "45 EUR per day", "55 EUR per day", "65 EUR per day"),
    _t("expense-approval-threshold", "expense approval threshold", "finance",
       "any single expense above {v} needs a director's approval", "500 EUR", "750 EUR", "900 EUR", "950 EUR", "1200 EUR"),
    _t("on-call-rotation", "on-call rotation length", "platform", "each on-call rotation lasts {v}",
       "7 days", "10 days", "14 days"),
    _t("pager-ack-target", "pager acknowledgement target", "platform", "a page must be acknowledged within {v}",
       "5 minutes", "10 minutes", "15 minutes"),
    _t("log-retention", "application log retention period", "security", "application logs are kept for {v}",
       "30 days", "60 days", "90 days", "180 days"),
    _t("customer-email-retention", "customer email retention period", "legal", "customer emails are retained for {v}",
       "12 months", "24 months", "36 months"),
    _t("backup-retention", "backup retention period", "it", "nightly backups are kept for {v}",
       "14 days", "30 days", "35 days", "90 days"),
    _t("cloud-vendor", "primary cloud vendor", "platform", "new workloads are deployed on {v}",
       "Stratus Cloud", "Nimbus Compute", "Cirrus Hosting"),
    _t("crm-vendor", "CRM vendor", "sales", "the company standardises on {v} as its CRM",
       "Ledgerly CRM", "PipeRiver", "Clientwise"),
    _t("payroll-provider", "payroll provider", "finance", "payroll is run through {v}",
       "PayHarbor", "Wagewell", "Salario"),
    _t("release-freeze-start", "year-end release freeze start date", "engineering",
       "the year-end release freeze starts on {v}", "12 December", "15 December", "18 December", "20 December"),
    _t("release-cadence", "release cadence", "engineering", "we ship to customers {v}",
       "every week", "every two weeks", "every three weeks", "once a month"),
    _t("long-haul-travel-class", "long-haul travel class", "finance",
       "flights longer than six hours are booked in {v}", "economy", "premium economy", "business class"),
    _t("hotel-nightly-cap", "hotel nightly cap", "finance", "hotel stays are reimbursed up to {v}",
       "150 EUR per night", "180 EUR per night", "200 EUR per night", "220 EUR per night"),
    _t("laptop-refresh-cycle", "laptop refresh cycle", "it", "laptops are replaced every {v}",
       "24 months", "30 months", "36 months", "48 months"),
    _t("home-office-budget", "home office equipment budget", "people",
       "each employee may spend up to {v} on home office equipment",
       "300 EUR per year", "400 EUR per year", "500 EUR per year", "600 EUR per year"),
    _t("password-rotation", "password rotation interval", "security", "passwords must be changed every {v}",
       "90 days", "180 days", "365 days"),
    _t("mfa-method", "required MFA method", "security", "every account must use {v} as its second factor",
       "an authenticator app", "a hardware security key", "a passkey"),
    _t("review-approvals", "required code review approvals", "engineering", "every pull request needs {v} before merging",
       "1 approval", "2 approvals", "3 approvals"),
    _t("test-coverage-floor", "minimum test coverage for merges", "engineering",
       "a merge must keep line coverage at or above {v}", "70 percent", "75 percent", "80 percent", "85 percent"),
    _t("sprint-length", "sprint length", "engineering", "sprints last {v}", "1 week", "2 weeks", "3 weeks"),
    _t("standup-time", "daily stand-up time", "engineering", "the daily stand-up starts at {v} Lisbon time",
       "09:15", "09:30", "10:00", "10:30"),
    _t("office-anchor-day", "office anchor day", "workplace", "the whole team is in the office on {v}",
       "Tuesdays", "Wednesdays", "Thursdays"),
    _t("parental-leave", "paid parental leave", "people", "parents receive {v} of fully paid leave",
       "12 weeks", "16 weeks", "20 weeks", "26 weeks"),
    _t("learning-budget", "annual learning budget", "people", "each person has a learning budget of {v}",
       "800 EUR a year", "1000 EUR a year", "1500 EUR a year", "2000 EUR a year"),
    _t("referral-bonus", "employee referral bonus", "people", "a successful referral earns {v}",
       "1000 EUR", "1500 EUR", "2000 EUR", "2500 EUR"),
    _t("p1-response-target", "priority-1 support response target", "support",
       "priority-1 tickets get a first response within {v}", "1 hour", "2 hours", "4 hours"),
    _t("postmortem-deadline", "postmortem deadline", "platform", "a postmortem is due within {v} of an incident",
       "3 working days", "5 working days", "7 working days", "10 working days"),
    _t("database-vendor", "managed database vendor", "platform", "production databases run on {v}",
       "TidePool DB", "Quarry SQL", "Basalt Data"),
    _t("ci-provider", "CI provider", "engineering", "all builds run on {v}", "BuildKiln", "Relay CI", "Forgeline"),
    _t("contractor-access-review", "contractor access review interval", "security",
       "contractor access is reviewed every {v}", "30 days", "60 days", "90 days"),
    _t("deploy-cutoff", "production deploy cut-off", "platform", "no production deploy starts after {v} local time",
       "15:00", "16:00", "17:00"),
    _t("vacation-carryover", "vacation carry-over limit", "people",
       "up to {v} of unused vacation carry over to the next year", "3 days", "5 days", "10 days"),
    _t("phone-allowance", "mobile phone allowance", "finance", "the monthly mobile phone allowance is {v}",
       "25 EUR", "30 EUR", "40 EUR"),
    _t("conference-trips", "conference trips per engineer", "engineering", "each engineer may attend {v}",
       "1 conference a year", "2 conferences a year", "3 conferences a year"),
    _t("key-rotation", "encryption key rotation interval", "security", "encryption keys are rotated every {v}",
       "90 days", "180 days", "365 days"),
    _t("data-deletion-deadline", "customer data deletion deadline", "legal",
       "customer data is deleted within {v} after a contract ends", "14 days", "30 days", "45 days", "60 days"),
    _t("coffee-supplier", "office coffee supplier", "workplace", "office coffee comes from {v}",
       "Roastwell", "Bean Harbour", "Kettle and Crane"),
    _t("desk-booking-window", "desk booking window", "workplace", "desks can be booked up to {v} ahead",
       "7 days", "14 days", "28 days"),
)

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")


def human_date(day) -> str:
    """'12 March 2025', independent of the process locale."""
    return f"{day.day} {MONTHS[day.month - 1]} {day.year}"


def sentence(text: str) -> str:
    return text[:1].upper() + text[1:]
