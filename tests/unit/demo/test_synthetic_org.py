"""The synthetic organisation: real, parseable files; gold answers that exist and hold at their date."""

from __future__ import annotations

import email.policy
import json
import mailbox
import re
import time
from datetime import UTC, date, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path

import pytest

from services.demo.questions import KINDS
from services.demo.synthetic_org import generate, gold_row_ids, main

webvtt = pytest.importorskip("webvtt", reason="webvtt-py is needed to check the generated meetings")

JIRA_TIME = "%Y-%m-%dT%H:%M:%S.%f%z"


def _squash(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def org(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("org"), seed=7)


@pytest.fixture(scope="module")
def files(org):
    """What the generated files themselves say, per (source, source_id): date, author, text."""
    index: dict[tuple[str, str], dict] = {}
    box = mailbox.mbox(org.mbox, factory=lambda f: email.message_from_binary_file(f, policy=email.policy.default),
                       create=False)
    for msg in box:
        body = msg.get_body(preferencelist=("plain", "html"))
        key = ("email", msg["Message-ID"].strip().strip("<>"))
        index[key] = {"date": parsedate_to_datetime(msg["Date"]), "author": msg["From"].addresses[0].display_name,
                      "text": body.get_content() if body else ""}
    box.close()
    for issue in json.loads(org.jira.read_text(encoding="utf-8"))["issues"]:
        fields = issue["fields"]
        index[("jira", issue["key"])] = {"date": datetime.strptime(fields["created"], JIRA_TIME),
                                         "author": fields["reporter"]["displayName"], "text": fields["description"]}
        for c in fields["comment"]["comments"]:
            index[("jira", f"{issue['key']}#comment-{c['id']}")] = {
                "date": datetime.strptime(c["created"], JIRA_TIME), "author": c["author"]["displayName"],
                "text": c["body"]}
    for path in org.meetings.glob("*.vtt"):
        raw = path.read_text(encoding="utf-8")
        day = date.fromisoformat(re.search(r"^NOTE date: (\S+)$", raw, re.M).group(1))
        organiser = re.search(r"^NOTE organiser: (.+)$", raw, re.M).group(1)
        text = " ".join(c.text for c in webvtt.read(str(path)))
        index[("meeting", path.stem)] = {"date": datetime(day.year, day.month, day.day, tzinfo=UTC),
                                         "author": organiser, "text": text}
    return index


def _ref(entry: dict) -> tuple[str, str]:
    return entry["source"], entry["source_id"]


def _start_of(day: str) -> datetime:
    return datetime.combine(date.fromisoformat(day), datetime.min.time(), tzinfo=UTC)


def test_same_seed_gives_byte_identical_files_and_another_seed_does_not(tmp_path):
    runs = [generate(tmp_path / name, seed=seed) for name, seed in (("a", 7), ("b", 7), ("c", 8))]
    trees = [{p.relative_to(r.root): p.read_bytes() for p in sorted(r.root.rglob("*")) if p.is_file()} for r in runs]
    assert trees[0] == trees[1]
    assert trees[0][Path("mail/org.mbox")] != trees[2][Path("mail/org.mbox")]


def test_rerun_into_the_same_folder_rewrites_instead_of_appending(tmp_path):
    first = generate(tmp_path, seed=3, threads=10)
    before = first.mbox.read_bytes()
    second = generate(tmp_path, seed=3, threads=10)
    assert second.mbox.read_bytes() == before
    assert len(list(second.meetings.glob("*.vtt"))) == second.counts["meetings"]


def test_generation_is_fast_and_sized_for_retrieval(tmp_path):
    started = time.perf_counter()
    org = generate(tmp_path, seed=11)
    assert time.perf_counter() - started < 5.0
    assert 800 <= org.counts["documents"] <= 1300
    assert org.counts["decision_threads"] == 36


def test_every_mail_parses_with_ids_dates_and_reply_headers(org):
    box = mailbox.mbox(org.mbox, factory=lambda f: email.message_from_binary_file(f, policy=email.policy.default),
                       create=False)
    messages = list(box)
    box.close()
    assert len(messages) == org.counts["emails"]
    ids = [m["Message-ID"].strip().strip("<>") for m in messages]
    assert len(set(ids)) == len(ids) and all(ids)
    kinds = set()
    for msg in messages:
        assert parsedate_to_datetime(msg["Date"]).tzinfo is not None
        for header in ("From", "To", "Cc", "Subject"):
            assert msg[header], f"{msg['Message-ID']}: {header} missing"
        if msg["In-Reply-To"]:
            parent = msg["In-Reply-To"].strip("<>")
            assert parent in ids
            assert msg["References"].split()[-1].strip("<>") == parent
        kinds.add((msg.get_content_type(), msg.get_content_charset()))
    assert ("text/html", "utf-8") in kinds
    assert ("multipart/alternative", None) in kinds
    assert ("text/plain", "iso-8859-1") in kinds


def test_every_issue_has_the_jira_search_fields(org):
    issues = json.loads(org.jira.read_text(encoding="utf-8"))["issues"]
    assert len(issues) == org.counts["jira_issues"]
    comment_ids = []
    for issue in issues:
        assert re.fullmatch(r"[A-Z]+-\d+", issue["key"])
        f = issue["fields"]
        assert isinstance(f["summary"], str) and f["summary"]
        assert isinstance(f["description"], str)
        assert f["reporter"]["displayName"] and f["reporter"]["emailAddress"]
        assert f["assignee"] is None or f["assignee"]["emailAddress"]
        assert f["status"]["name"] and f["priority"]["name"] and isinstance(f["labels"], list)
        created, updated = (datetime.strptime(f[k], JIRA_TIME) for k in ("created", "updated"))
        assert created <= updated
        for c in f["comment"]["comments"]:
            assert c["author"]["displayName"] and c["body"]
            assert datetime.strptime(c["created"], JIRA_TIME) >= created
            comment_ids.append(c["id"])
    assert len(comment_ids) == org.counts["jira_comments"] == len(set(comment_ids))


def test_every_meeting_is_valid_webvtt_with_notes_voices_and_timings(org):
    paths = sorted(org.meetings.glob("*.vtt"))
    assert len(paths) == org.counts["meetings"]
    for path in paths:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+", path.stem)
        raw = path.read_text(encoding="utf-8")
        assert raw.startswith("WEBVTT\n")
        assert re.search(r"^NOTE date: (\S+)$", raw, re.M).group(1) == path.stem[:10]
        assert re.search(r"^NOTE organiser: \S.+$", raw, re.M)
        captions = webvtt.read(str(path))
        assert len(captions) >= 3
        previous_end = 0.0
        for caption in captions:
            start, end = caption.start_in_seconds, caption.end_in_seconds
            assert previous_end <= start < end
            previous_end = end
            assert caption.voice


def test_every_gold_reference_exists_in_the_files(org, files):
    assert len(org.questions) >= 100
    for q in org.questions:
        assert q["gold"], q["id"]
        for ref in q["gold"]:
            assert _ref(ref) in files, f"{q['id']}: {ref} not in the generated files"


def test_questions_cover_every_kind_and_known_at_is_rare(org, files):
    kinds = {q["kind_of_question"] for q in org.questions}
    assert kinds == set(KINDS)
    known = [q for q in org.questions if q["known_at"]]
    assert 1 <= len(known) <= 3
    for q in known:  # written before the correction existed: only the uncorrected version is gold
        bound = datetime.fromisoformat(q["known_at"])
        assert len(q["gold"]) == 1 and files[_ref(q["gold"][0])]["date"] < bound
    assert len({q["id"] for q in org.questions}) == len(org.questions)


def test_most_threads_have_three_versions_by_different_authors_per_the_files(org, files):
    good = 0
    for thread in org.threads:
        authors = set()
        for v in thread["versions"]:
            doc = files[_ref(v)]
            assert doc["author"] == v["author"]
            assert _squash(v["stated"]) in _squash(doc["text"]), f"{v['source_id']} does not state {v['stated']}"
            authors.add(doc["author"])
        good += len(thread["versions"]) >= 3 and len(authors) >= 2
    assert good >= 30


def test_dated_questions_have_gold_from_before_the_date_and_the_latest_version_then(org, files):
    threads = {t["thread"]: t for t in org.threads}
    dated = [q for q in org.questions if q["as_of"]]
    assert len(dated) >= 100
    for q in dated:
        bound = _start_of(q["as_of"])
        for ref in q["gold"]:
            assert files[_ref(ref)]["date"] < bound, f"{q['id']}: {ref['source_id']} is after {q['as_of']}"
        in_force = [v for v in threads[q["thread"]]["versions"] if files[_ref(v)]["date"] < bound][-1]
        assert _ref(in_force) in {_ref(g) for g in q["gold"]}, q["id"]


def test_answers_are_spelled_out_in_the_gold_documents(org, files):
    for q in org.questions:
        if q["kind_of_question"] in ("current", "as_of", "correction"):
            texts = _squash(" ".join(files[_ref(g)]["text"] for g in q["gold"]))
            assert _squash(q["answer"]) in texts, q["id"]
        if q["kind_of_question"] == "who_decided":
            assert q["answer"].startswith(files[_ref(q["gold"][0])]["author"])


def test_contradictions_are_gold_only_where_asked_and_corrections_come_weeks_later(org, files):
    gold = {_ref(g) for q in org.questions if q["kind_of_question"] != "contradiction" for g in q["gold"]}
    clashes = [t["contradiction"] for t in org.threads if t["contradiction"]]
    fixes = [t for t in org.threads if t["correction"]]
    assert len(clashes) >= 5 and len(fixes) >= 5
    for clash in clashes:
        assert _ref(clash) not in gold
        assert "not an official decision" in _squash(files[_ref(clash)]["text"])
        assert clash["value"] in _squash(files[_ref(clash)]["text"])
    for thread in fixes:
        fix = thread["correction"]
        version = next(v for v in thread["versions"] if v["source_id"] == fix["corrects"])
        assert version["stated"] != version["value"]
        text = _squash(files[_ref(fix)]["text"])
        assert text.startswith("Hi all, Correction:") or text.startswith("Correction:")
        assert f"was {version['value']}, not {version['stated']}" in text
        assert (files[_ref(fix)]["date"] - files[_ref(version)]["date"]).days >= 13


def test_gold_row_ids_are_stable_per_tenant(org):
    q = next(q for q in org.questions if len(q["gold"]) > 1)
    ids = gold_row_ids(q)
    assert len(ids) == len(q["gold"]) == len(set(ids))
    assert ids == gold_row_ids(dict(q)) and all(i.startswith("r") for i in ids)
    assert set(gold_row_ids(q, tenant="acme")).isdisjoint(ids)


def test_cli_prints_counts_and_rejects_a_bad_thread_count(tmp_path, capsys):
    assert main([str(tmp_path), "--seed", "5", "--threads", "12"]) == 0
    out = capsys.readouterr().out
    assert "decision_threads: 12" in out and re.search(r"^documents: \d+$", out, re.M)
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--threads", "0"])
    assert "threads" in capsys.readouterr().err


# --- the organisational evaluation: versions, justification chains, contradicting statements -----

@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_bench_seed_is_byte_identical_on_rerun_and_unlike_the_others(tmp_path, seed):
    def tree(root: Path) -> dict:
        return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    first = tree(generate(tmp_path / "a", seed=seed, threads=24, filler=0.4).root)
    assert tree(generate(tmp_path / "b", seed=seed, threads=24, filler=0.4).root) == first
    for other in {1, 2, 3} - {seed}:
        again = tree(generate(tmp_path / f"s{other}", seed=other, threads=24, filler=0.4).root)
        assert again[Path("questions.json")] != first[Path("questions.json")]
        assert again[Path("mail/org.mbox")] != first[Path("mail/org.mbox")]


def test_the_filler_scale_sizes_the_everyday_traffic_and_is_bounded(tmp_path):
    small = generate(tmp_path / "small", seed=1, threads=24, filler=0.4)
    assert 400 <= small.counts["documents"] <= 800 and small.counts["questions"] >= 60
    assert generate(tmp_path / "none", seed=1, threads=24, filler=0.0).counts["documents"] < small.counts["documents"]
    with pytest.raises(ValueError, match="filler"):
        generate(tmp_path / "bad", filler=-1)


def test_version_questions_name_the_version_in_force_and_every_version_it_superseded(org, files):
    threads = {t["thread"]: t for t in org.threads}
    versioned = [q for q in org.questions if q["version"]]
    assert {q["kind_of_question"] for q in versioned} == set(KINDS) - {"justification"}
    for q in versioned:
        versions = [_ref(v) for v in threads[q["thread"]]["versions"]]
        version = _ref(q["version"])
        assert version in {_ref(g) for g in q["gold"]}, q["id"]
        assert [_ref(v) for v in q["superseded"]] == versions[: versions.index(version)], q["id"]
        for old in q["superseded"]:
            assert files[_ref(old)]["date"] < files[version]["date"]
        if q["as_of"]:
            assert files[version]["date"] < _start_of(q["as_of"]), q["id"]
            later = versions[versions.index(version) + 1:]
            assert all(files[v]["date"] >= _start_of(q["as_of"]) for v in later), f"{q['id']}: a later version held"
        if q["kind_of_question"] == "current":
            assert version == versions[-1]


def test_justification_chains_cite_backwards_from_decision_to_recommendation_to_trigger(org, files):
    chains = [q for q in org.questions if q["kind_of_question"] == "justification"]
    assert len(chains) >= 15
    threads = {t["thread"]: t for t in org.threads}
    for q in chains:
        decision, advice, trigger = (files[_ref(g)] for g in q["gold"])
        assert trigger["date"] < advice["date"] < decision["date"], q["id"]
        why = next(v["because"] for v in threads[q["thread"]]["versions"] if v["source_id"] == q["gold"][0]["source_id"])
        assert f"recommendation {why['recommendation']['author']} made on" in _squash(decision["text"])
        assert f"'{why['trigger']['subject']}'" in _squash(advice["text"])
        # The decision names only the recommendation, not the trigger: the chain has to be followed.
        assert why["trigger"]["subject"] not in _squash(decision["text"])


def test_contradiction_questions_hold_each_statement_and_the_rule_it_contradicts(org, files):
    asked = [q for q in org.questions if q["kind_of_question"] == "contradiction"]
    stale = [t["stale"] for t in org.threads if t["stale"]]
    assert len(asked) >= 10 and len(stale) >= 5
    statements = {_ref(s): s for t in org.threads for s in (t["contradiction"], t["stale"]) if s}
    for q in asked:
        said = [statements[_ref(g)] for g in q["gold"] if _ref(g) in statements]
        assert said, q["id"]
        rule = q["answer"].rsplit("; the rule was ", 1)[1]
        for s in said:
            assert s["value"] != rule and s["value"] in _squash(files[_ref(s)]["text"])
    for s in stale:  # a replaced rule, stated as if it still held
        assert "not an official decision" not in _squash(files[_ref(s)]["text"])
