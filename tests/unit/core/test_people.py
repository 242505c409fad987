"""The people directory merges only by exact address, name-with-address, or mapping."""

import json
import random
from datetime import UTC, datetime

import pytest

from schemas.rows import Row
from services.core.people import BadMapping, aliases_of, build, check_mapping, parse, with_prefix

AT = datetime(2026, 1, 1, tzinfo=UTC)


def row(n, author="", participants=()):
    return Row(row_id=f"r{n}", tenant="t", text="x", author=author, participants=list(participants),
               ingest_position=n, ingested_at=AT)


def org(seed=7):
    """People with shared first names and look-alike names and domains; each with its aliases."""
    firsts = ["Dana", "Dan", "Ana", "Sam", "Kim"]
    lasts = ["Lee", "Li", "Le", "Lee-Park", "Leigh"]
    domains = ["acme.example", "acme-corp.example", "acme.example.org"]
    people = {}
    for i, first in enumerate(firsts):
        for j, last in enumerate(lasts):
            domain = domains[(i + j) % len(domains)]
            address = f"{first.lower()}.{last.lower()}@{domain}"
            people[address] = f"{first} {last}"
    rng = random.Random(seed)
    rows, n = [], 0
    for address, name in people.items():
        forms = [f"{name} <{address}>", address.upper(), address, f'"{name}" <{address.title()}>']
        for form in forms:
            n += 1
            others = rng.sample(sorted(people), 2)
            rows.append(row(n, author=form, participants=others))
    return people, rows


def test_generated_org_never_merges_two_people_and_finds_every_alias():
    people, rows = org()
    persons = build(rows)
    assert len(persons) == len(people)
    for person in persons.values():
        assert len(person.addresses) == 1, person
    by_address = {next(iter(p.addresses)): p for p in persons.values()}
    for address, name in people.items():
        person = by_address[address]
        assert person.display_name == name
        assert f"{name} <{address}>" in person.aliases
        assert address.upper() in person.aliases
        assert person.roles["author"] == 4


def test_look_alike_names_and_domains_stay_apart():
    rows = [row(1, "Dana Lee <dana@acme>"), row(2, "Dana Li <dana@acme-corp>"), row(3, "Dana Li"),
            row(4, "Dana Lee")]
    persons = build(rows)
    lee = next(p for p in persons.values() if "dana@acme" in p.addresses)
    li = next(p for p in persons.values() if "dana@acme-corp" in p.addresses)
    assert lee.person_id != li.person_id
    assert lee.aliases == {"Dana Lee <dana@acme>", "Dana Lee"}
    assert li.aliases == {"Dana Li <dana@acme-corp>", "Dana Li"}


def test_bare_first_name_stays_its_own_entry_unless_mapped():
    rows = [row(1, "Dana Lee <dana@acme>"), row(2, "Dana"), row(3, "Dana Moss <dmoss@acme>")]
    persons = build(rows)
    assert len(persons) == 3
    mapped = build(rows, check_mapping({"Dana": "dana-lee", "dana@acme": "dana-lee"}))
    assert set(mapped) >= {"dana-lee"}
    assert mapped["dana-lee"].aliases == {"Dana Lee <dana@acme>", "Dana"}
    assert len(mapped) == 2


def test_a_name_written_with_two_addresses_is_not_guessed():
    rows = [row(1, "Sam Kim <sam@a.example>"), row(2, "Sam Kim <sam@b.example>"), row(3, "Sam Kim")]
    persons = build(rows)
    assert len(persons) == 3
    assert all(len(p.addresses) <= 1 for p in persons.values())


def test_person_ids_are_stable_across_builds_and_row_order():
    _, rows = org()
    first = build(rows)
    again = build(list(reversed(rows)))
    assert set(first) == set(again)
    assert all(first[pid].aliases == again[pid].aliases for pid in first)


def test_roles_count_author_and_participant():
    rows = [row(1, "a@x.example", ["b@x.example", "a@x.example"]), row(2, "b@x.example", ["a@x.example"])]
    persons = {next(iter(p.addresses)): p for p in build(rows).values()}
    assert persons["a@x.example"].roles == {"author": 1, "participant": 1}
    assert persons["b@x.example"].roles == {"author": 1, "participant": 1}


def test_a_mail_sender_named_among_participants_joins_the_meeting_name_as_author():
    # The mail connector stores the sender as a bare address and adds "Name <address>" to the
    # participants; a meeting wrote the display name alone.
    rows = [row(1, "dana@acme.example", ["bob@acme.example", "Dana Lee <dana@acme.example>"]),
            row(2, "Dana Lee"), row(3, "bob@acme.example", ["dana@acme.example"])]
    persons = {p.display_name: p for p in build(rows).values()}
    assert set(persons) == {"Dana Lee", "bob@acme.example"}
    dana = persons["Dana Lee"]
    assert dana.aliases == {"dana@acme.example", "Dana Lee <dana@acme.example>", "Dana Lee"}
    # Her own named form is an alias of the author, not a second role; row 3 makes her a participant.
    assert dana.roles == {"author": 2, "participant": 1}


def test_another_persons_named_form_among_participants_stays_a_participant():
    rows = [row(1, "dana@acme.example", ["Bob Ray <bob@acme.example>"])]
    persons = {p.display_name: p for p in build(rows).values()}
    assert persons["Bob Ray"].roles == {"participant": 1}
    assert persons["dana@acme.example"].roles == {"author": 1}


def test_roles_follow_the_rows_kind_and_a_tickets_assignee_tag():
    at = dict(tenant="t", text="x", ingest_position=1, ingested_at=AT)
    rows = [Row(row_id="m", kind="email", author="dana@acme.example",
                participants=["bob@acme.example", "Dana Lee <dana@acme.example>"], **at),
            Row(row_id="v", kind="meeting", author="Dana Lee", participants=["Bob Ray", "Sam Kim"], **at),
            Row(row_id="t", kind="ticket", author="Sam Kim", participants=["Sam Kim", "Bob Ray", "Dana Lee"],
                tags=["ticket:OPS-1", "assignee:bob ray"], **at)]
    roles = {p.display_name: p.roles for p in build(rows).values()}
    assert roles["Dana Lee"] == {"author": 2, "participant": 1}
    assert roles["bob@acme.example"] == {"recipient": 1}
    assert roles["Bob Ray"] == {"attendee": 1, "assignee": 1}
    assert roles["Sam Kim"] == {"attendee": 1, "author": 1}


def test_a_person_page_lists_each_row_once_under_its_role():
    from services.app.people import Directory, rows_of

    at = dict(tenant="t", text="x", ingested_at=AT)
    rows = [Row(row_id="t1", kind="ticket", author="Sam Kim", participants=["Bob Ray"], tags=["assignee:Bob Ray"],
                ingest_position=1, **at),
            Row(row_id="v1", kind="meeting", author="Sam Kim", participants=["Bob Ray"], ingest_position=2, **at),
            Row(row_id="d1", author="Bob Ray", participants=["Sam Kim"], ingest_position=3, **at)]
    directory = Directory(rows)
    bob = next(p for p in directory.persons.values() if p.display_name == "Bob Ray")
    listed = {role: [r.row_id for r in found] for role, found in rows_of(directory, bob).items()}
    assert listed == {"author": ["d1"], "attendee": ["v1"], "assignee": ["t1"]}


def test_aliases_of_and_prefix():
    rows = [row(1, "Dana Lee <dana@acme>"), row(2, "Kim Li <kim@acme>")]
    persons = build(rows)
    dana = next(p for p in persons.values() if p.display_name == "Dana Lee")
    assert aliases_of(persons, [dana.person_id, "p-unknown"]) == ["Dana Lee <dana@acme>"]
    assert [p.display_name for p in with_prefix(persons, "da")] == ["Dana Lee"]
    assert [p.display_name for p in with_prefix(persons, "kim@")] == ["Kim Li"]
    assert len(with_prefix(persons, None)) == 2


@pytest.mark.parametrize("hostile", ["x" * 10_000, "Dana\x00Lee", "Dana\u202eeeL", "dana\u200b@acme",
                                     "", "   "])
def test_hostile_alias_strings_are_left_out(hostile):
    assert parse(hostile) is None
    assert build([row(1, hostile, [hostile])]) == {}


@pytest.mark.parametrize("mapping", [
    ["Dana"],
    {"Dana": {"id": "x"}},
    {"Dana": 7},
    {"x" * 10_000: "dana"},
    {"Dana\x00": "dana"},
    {"Dana": "bad id with spaces"},
    {"Dana": "y" * 65},
])
def test_hostile_mapping_is_refused_with_a_reason(mapping):
    with pytest.raises(BadMapping) as caught:
        check_mapping(json.loads(json.dumps(mapping)))
    assert str(caught.value)
    assert len(str(caught.value)) < 300


def test_a_cached_directory_keeps_no_row_text():
    # A directory is cached per write position: holding documents would hold the store many times over.
    from services.app.people import Directory, rows_of

    rows = [Row(row_id=f"r{n}", tenant="t", text="secret body " * 500, author="ann@corp.example",
                participants=["bo@corp.example"], event_time=datetime(2024, 1, n + 1, tzinfo=UTC),
                ingest_position=n, ingested_at=AT) for n in range(3)]
    directory = Directory(rows, None)
    assert all("secret" not in repr(entry) for entry in directory.rows)
    (ann,) = [p for p in directory.persons.values() if "ann@corp.example" in p.aliases]
    assert [r.row_id for r in rows_of(directory, ann)["author"]] == ["r2", "r1", "r0"]


def _rows_of_documents(documents):
    return [Row(row_id=f"d{n}", tenant="t", text=d.text, author=d.author, kind=d.kind, participants=d.participants,
                tags=d.tags, ingest_position=n, ingested_at=AT) for n, d in enumerate(documents, start=1)]


def test_a_jira_users_display_name_and_address_are_one_person_and_the_assignee_is_listed_as_such():
    # Jira authors rows and tags the assignee by display name, and names participants by address:
    # before the connector wrote "Name <address>", Bo Chen was two persons and never an assignee.
    from services.app.people import Directory, rows_of
    from services.connectors.tickets.common import Comment, Ticket, ticket_documents

    ticket = Ticket("jira", "OPS-7", "Login broken", "It fails.", "Ana Ruiz", "ana@example.com", AT,
                    assignee="Bo Chen", assignee_who="bo@example.com",
                    comments=[Comment("Reproduced.", "Bo Chen", AT, "1", "bo@example.com"),
                              Comment("Fixed.", "Cy Diaz", AT, "2", None)])
    directory = Directory(_rows_of_documents(ticket_documents(ticket)))
    by_name = {p.display_name: p for p in directory.persons.values()}
    assert sorted(by_name) == ["Ana Ruiz", "Bo Chen", "Cy Diaz"]
    bo = by_name["Bo Chen"]
    assert bo.addresses == {"bo@example.com"}
    listed = {role: [r.row_id for r in found] for role, found in rows_of(directory, bo).items()}
    assert listed == {"author": ["d2"], "assignee": ["d1", "d3"]}
    # The reporter is named again as "Ana Ruiz <ana@…>": an alias of the author, not a participant.
    assert by_name["Ana Ruiz"].roles == {"author": 1, "participant": 2}
    assert by_name["Ana Ruiz"].addresses == {"ana@example.com"}


def test_a_chat_mention_gives_the_mentioned_role_and_never_names_someone_unknown():
    from services.app.people import Directory, rows_of
    from services.connectors.sources.chat import Message, Thread, thread_version

    thread = Thread("C1", "general", "1", [
        Message("1", "Dana Lee", AT, "@Kim Li can you look?", mentions=("Kim Li",)),
        Message("2", "Sam Ro", AT, "@Dana Lee on it", mentions=("Dana Lee",))])
    version = thread_version("slack", thread, "w")
    assert "mention:Kim Li" in version.document.tags and "mention:Dana Lee" in version.document.tags
    directory = Directory(_rows_of_documents([version.document]))
    by_name = {p.display_name: p for p in directory.persons.values()}
    assert sorted(by_name) == ["Dana Lee", "Kim Li", "Sam Ro"]
    assert by_name["Kim Li"].roles == {"mentioned": 1}
    assert {role: [r.row_id for r in found] for role, found in rows_of(directory, by_name["Kim Li"]).items()} \
        == {"author": [], "mentioned": ["d1"]}
    assert by_name["Dana Lee"].roles == {"author": 1}  # mentioned in her own thread: still its author


@pytest.mark.parametrize("spoof", ["Dana Lee <dana@acme.example>", "dana@acme.example", "DANA@ACME.EXAMPLE"])
def test_a_chat_user_who_names_themself_by_an_address_does_not_become_that_person(spoof):
    # Chat users set their own display names; an exact address in one would join the chat user
    # to the mail identity, and their threads would show on that person's page as authored.
    from services.app.people import Directory, rows_of
    from services.connectors.sources.chat import Message, Thread, thread_version

    thread = Thread("C1", "general", "1", [Message("1", spoof, AT, "I approve the wire transfer."),
                                           Message("2", "Sam Ro", AT, f"ok @{spoof}", mentions=(spoof,))])
    chat = thread_version("slack", thread, "w").document
    assert "@" not in chat.author and "<" not in chat.author and chat.author in chat.text
    mail = Row(row_id="m1", tenant="t", text="x", kind="email", author="dana@acme.example",
               participants=["Dana Lee <dana@acme.example>"], ingest_position=9, ingested_at=AT)
    directory = Directory([*_rows_of_documents([chat]), mail])
    (dana,) = [p for p in directory.persons.values() if "dana@acme.example" in p.addresses]
    assert {role: [r.row_id for r in found] for role, found in rows_of(directory, dana).items()} == {"author": ["m1"]}
    assert len(directory.persons) == 3  # Dana (mail), the chat user as written, Sam


@pytest.mark.parametrize("hostile", ["Eve <ceo@corp.example>", "ceo@corp.example", "Eve >", "   "])
def test_a_jira_display_name_that_could_read_as_an_address_adds_no_pair(hostile):
    from services.connectors.tickets.common import Ticket, ticket_documents

    ticket = Ticket("jira", "OPS-8", "x", "y", "Ana Ruiz", "ana@example.com", AT,
                    assignee=hostile, assignee_who="eve@example.com")
    (doc,) = ticket_documents(ticket)
    assert doc.participants == ["ana@example.com", "eve@example.com", "Ana Ruiz <ana@example.com>"]
