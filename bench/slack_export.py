"""Slack source throughput through a live server, beside the email connector on as many items.

    .venv/bin/python -m bench.slack_export [--messages 10000] [--seed 7] [--out bench/out/slack_export]

Generates a Slack workspace export (public and private channels, group DMs and DMs, threads, edits,
a few deleted thread starters; users.json, channels.json, groups.json, mpims.json, dms.json and one
folder of day files per conversation) and an mbox of as many messages, deterministically from the
seed, under --out (bench/out/ is not committed). Each goes into its own data folder, read by a real
`orgmem serve` (bench/live_server.py) through `POST /v1/connectors/{slack,email}` with a writer key,
the Slack one with an access map for every user and private conversation. Printed per connector:
the items, the documents the run appended (a thread is one document), the seconds the request took
(reading, the write path, the log), items and documents per second, and the server's peak RSS: its
own high-water mark (VmHWM) and the most its process tree held at once, sampled every 0.2 s.

The server's indexer embeds what arrives while the run goes on, as in production; --indexed also
waits until the projections hold every document and prints that time (the sentence encoder on
CPU: minutes at this size).
"""

from __future__ import annotations

import argparse
import json
import mailbox
import os
import random
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime
from pathlib import Path

import httpx

from bench import live_report as lr

ROOT = Path(__file__).resolve().parents[1]
START = datetime(2024, 1, 1, tzinfo=UTC).timestamp()
SPAN_S = 90 * 86400  # the export covers three months
WORDS = ("budget launch roadmap hiring security audit vendor contract migration outage policy remote "
         "office travel onboarding database latency customer churn forecast quarter review approval "
         "deadline incident payroll laptop compliance retention pricing release backlog sprint design "
         "metrics dashboard invoice renewal support ticket rollout freeze staging canary").split()
PUBLIC, PRIVATE, MPIMS, DMS, USERS = 12, 6, 3, 10, 40
REPLY_SHARE = 0.6  # of messages: a reply to one of the conversation's recent threads
EDIT_SHARE = 0.05
DELETED_PER_THOUSAND = 1  # thread starters deleted after their replies (a Slack tombstone)


def _text(rng: random.Random, users: list[str]) -> str:
    words = rng.sample(WORDS, rng.randint(6, 18))
    if rng.random() < 0.1:
        words.insert(rng.randrange(len(words)), f"<@{rng.choice(users)}>")
    return " ".join(words).capitalize() + "."


def _conversations(rng: random.Random, users: list[str]) -> list[dict]:
    """Each conversation: id, folder, metadata file, members, and its weight in the traffic."""
    out = []
    for i in range(PUBLIC):
        out.append({"id": f"C{i:08d}", "name": f"team-{i:02d}", "file": "channels.json",
                    "members": sorted(rng.sample(users, rng.randint(8, len(users)))), "weight": 4})
    for i in range(PRIVATE):
        out.append({"id": f"G{i:08d}", "name": f"private-{i:02d}", "file": "groups.json",
                    "members": sorted(rng.sample(users, rng.randint(3, 12))), "weight": 2})
    for i in range(MPIMS):
        members = sorted(rng.sample(users, 3))
        out.append({"id": f"G9{i:07d}", "name": "mpdm-" + "--".join(members) + "-1", "file": "mpims.json",
                    "members": members, "weight": 1})
    for i in range(DMS):
        out.append({"id": f"D{i:08d}", "name": "", "file": "dms.json", "members": sorted(rng.sample(users, 2)),
                    "weight": 1})
    return out


def generate(root: Path, messages: int = 10_000, seed: int = 7) -> dict:
    """Write the export under `root` (a folder); its manifest: what the Slack source should find."""
    rng = random.Random(seed)
    users = [f"U{i:08d}" for i in range(USERS)]
    conversations = _conversations(rng, users)
    weights = [c["weight"] for c in conversations]
    days: dict[tuple[str, str], list[dict]] = {}
    roots: dict[str, list[str]] = {c["id"]: [] for c in conversations}
    replies: Counter = Counter()
    entries: dict[str, dict] = {}  # ts -> message, to turn a starter into a tombstone later
    counts = Counter()
    step = SPAN_S / max(messages, 1)
    for i in range(messages):
        channel = rng.choices(conversations, weights)[0]
        seconds = int(START + i * step)
        stamp = f"{seconds}.{i:06d}"  # unique across the export: the counter is its fraction
        user = rng.choice(channel["members"])
        entry = {"type": "message", "user": user, "text": _text(rng, users), "ts": stamp}
        recent = roots[channel["id"]][-20:]
        if recent and rng.random() < REPLY_SHARE:
            starter = rng.choice(recent)
            entry["thread_ts"] = starter
            replies[starter] += 1
        else:
            roots[channel["id"]].append(stamp)
        if rng.random() < EDIT_SHARE:
            entry["edited"] = {"user": user, "ts": f"{seconds + 60}.000000"}
            counts["edited"] += 1
        folder = channel["id"] if channel["file"] == "dms.json" else channel["name"]
        day = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d")
        days.setdefault((folder, day), []).append(entry)
        entries[stamp] = entry
    # A few starters of threads with replies are deleted: Slack keeps a tombstone, the replies stay.
    answered = sorted(replies)
    for stamp in rng.sample(answered, min(len(answered), max(3, messages * DELETED_PER_THOUSAND // 1000))):
        entry = entries[stamp]
        counts["edited"] -= "edited" in entry
        entry.clear()
        entry.update({"type": "message", "subtype": "tombstone", "user": "USLACKBOT", "hidden": True,
                      "text": "This message was deleted.", "ts": stamp, "thread_ts": stamp})
        counts["deleted"] += 1

    root.mkdir(parents=True, exist_ok=True)
    (root / "users.json").write_text(json.dumps([{"id": u, "name": f"user{n}", "real_name": f"User {n}",
                                                  "profile": {"display_name": f"user{n}"}}
                                                 for n, u in enumerate(users)]))
    for name in ("channels.json", "groups.json", "mpims.json", "dms.json"):
        listed = [{"id": c["id"], **({"name": c["name"]} if c["name"] else {}), "members": c["members"]}
                  for c in conversations if c["file"] == name]
        (root / name).write_text(json.dumps(listed))
    for (folder, day), batch in sorted(days.items()):
        (root / folder).mkdir(exist_ok=True)
        (root / folder / f"{day}.json").write_text(json.dumps(batch, indent=1))
    private = {c["id"] for c in conversations if c["file"] != "channels.json"}
    threads = [(cid, stamp) for cid, stamps in roots.items() for stamp in stamps]
    return {
        "messages": messages, "deleted": counts["deleted"], "edited": counts["edited"],
        "text_messages": messages - counts["deleted"],
        "threads": sum(1 for _, stamp in threads if replies[stamp]),  # a starter with replies
        "thread_documents": len(threads),  # every starter is a document, a thread of one included
        "private_thread_documents": sum(1 for cid, _ in threads if cid in private),
        "public_channels": PUBLIC, "private_channels": PRIVATE, "mpims": MPIMS, "dms": DMS, "users": USERS,
        "day_files": len(days),
    }


def access_map() -> dict:
    """Every generated user to a principal, every private conversation's members by user entries."""
    return {"users": {f"U{i:08d}": f"user{i}@bench.example" for i in range(USERS)}}


def write_mbox(path: Path, messages: int = 10_000, seed: int = 7) -> int:
    """An mbox of `messages` messages, a third of them replies (In-Reply-To); the count written."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    box = mailbox.mbox(str(path), create=True)
    box.lock()
    try:
        step, sent = SPAN_S / max(messages, 1), []
        for i in range(messages):
            when = datetime.fromtimestamp(int(START + i * step), UTC)
            sender, to = rng.sample(range(USERS), 2)
            mail = EmailMessage()
            mail["From"] = f"User {sender} <user{sender}@bench.example>"
            mail["To"] = f"user{to}@bench.example"
            mail["Date"] = format_datetime(when)
            mail["Message-ID"] = f"<m{i}.{seed}@bench.example>"
            subject = " ".join(rng.sample(WORDS, 4))
            if sent and rng.random() < 1 / 3:
                parent, subject = rng.choice(sent[-50:])
                mail["In-Reply-To"] = parent
                subject = subject if subject.startswith("Re: ") else f"Re: {subject}"
            mail["Subject"] = subject
            mail.set_content(" ".join(rng.choice(WORDS) for _ in range(rng.randint(30, 120))) + "\n")
            entry = mailbox.mboxMessage(mail)
            entry.set_from(f"user{sender}@bench.example", time.gmtime(when.timestamp()))
            box.add(entry)
            sent.append((mail["Message-ID"], subject))
        box.flush()
    finally:
        box.unlock()
        box.close()
    return messages


class PeakRss:
    """The most a process tree held at once, sampled every 0.2 s in a thread."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, lr.tree_rss_bytes(self.pid) or 0)
            self._stop.wait(0.2)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def high_water(pid: int) -> int | None:
    """The process's own peak RSS (VmHWM), while it runs."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def ingest(data: Path, kind: str, body: dict, indexed: bool) -> dict:
    """One connector run through the API of a fresh server on `data`; its figures."""
    from bench.live_server import Server, client, create_keys

    keys = create_keys(data)
    server = Server(data, cwd=ROOT)
    try:
        peak = PeakRss(server.proc.pid)
        with client(server.url, keys["writer"]) as http:
            http.timeout = httpx.Timeout(3600)
            started = time.perf_counter()
            answer = http.post(f"/v1/connectors/{kind}", json=body)
            seconds = time.perf_counter() - started
            if answer.status_code != 200:
                raise SystemExit(f"{kind}: {answer.status_code} {answer.text[:2000]}")
            report = answer.json()
            indexed_s = None
            if indexed:
                while http.get("/readyz").json()["applied_position"] < report["log_position"]:
                    time.sleep(0.5)
                indexed_s = time.perf_counter() - started
        hwm = high_water(server.proc.pid)
        tree_peak = peak.stop()
    finally:
        server.stop()
    return {"seconds": seconds, "documents": report["documents"], "items_seen": report["items_seen"],
            "dead_letters": len(report["dead_letters"]), "unmapped": report.get("unmapped", 0),
            "hwm": hwm, "tree_peak": tree_peak, "indexed_s": indexed_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "slack_export",
                        help="a folder that does not exist yet (bench/out/ is not committed)")
    parser.add_argument("--indexed", action="store_true", help="also wait until every document is indexed")
    args = parser.parse_args(argv)
    if args.out.exists():
        raise SystemExit(f"{args.out} exists: name a new folder (--out)")
    slack_data, mail_data = args.out / "slack-data", args.out / "email-data"
    export = slack_data / "inbox" / "default" / "slack-export"  # the tenant's default connector root
    mbox = mail_data / "inbox" / "default" / "bench.mbox"
    os.umask(0o077)  # the data folders' own mode: the server would otherwise tighten each file and say so
    made = time.perf_counter()
    manifest = generate(export, args.messages, args.seed)
    write_mbox(mbox, args.messages, args.seed)
    print(f"generated in {time.perf_counter() - made:.1f} s under {args.out}: {json.dumps(manifest)}", flush=True)

    slack = ingest(slack_data, "slack", {"paths": [str(export)], "access_map": access_map()}, args.indexed)
    if slack["documents"] != manifest["thread_documents"] or slack["dead_letters"] or slack["unmapped"]:
        raise SystemExit(f"slack: the run does not match the export: {slack} against {manifest}")
    email = ingest(mail_data, "email", {"paths": [str(mbox)]}, args.indexed)
    if email["dead_letters"]:
        raise SystemExit(f"email: {email['dead_letters']} dead letters")

    print(f"\n{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, seed {args.seed}; the indexer embeds beside each run")
    print("| connector | items | documents | seconds | items/s | documents/s | server VmHWM (MiB) | "
          "tree peak RSS (MiB) |" + (" indexed after (s) |" if args.indexed else ""))
    print("|---|---|---|---|---|---|---|---|" + ("---|" if args.indexed else ""))
    for name, unit, run, items in (("slack", "messages", slack, manifest["messages"]),
                                   ("email (mbox)", "messages", email, args.messages)):
        line = (f"| {name} | {items} {unit} | {run['documents']} | {run['seconds']:.1f} | {items / run['seconds']:.0f} | "
                f"{run['documents'] / run['seconds']:.0f} | {lr.mib(run['hwm'])} | {lr.mib(run['tree_peak'])} |")
        print(line + (f" {run['indexed_s']:.0f} |" if args.indexed else ""))
    print(f"slack: {manifest['thread_documents']} thread documents ({manifest['threads']} with replies, "
          f"{manifest['private_thread_documents']} private), {manifest['edited']} edited, {manifest['deleted']} "
          f"deleted starters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
