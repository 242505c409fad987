"""`orgmem demo`: generate the synthetic organization, run the three connectors over it, index it,
show how an answer changes across the timeline, then serve it."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path


def _walkthrough(memory, questions: list[dict]) -> None:
    from services.core.caller import Caller

    by_thread: dict[str, list[dict]] = {}
    for q in questions:
        if q["kind_of_question"] in ("as_of", "current") and not q.get("known_at"):
            by_thread.setdefault(q["thread"], []).append(q)
    thread, asked = max(by_thread.items(), key=lambda item: len(item[1]))
    asked.sort(key=lambda q: q["as_of"] or "9999")
    print(f"\nHow one decision reads across the timeline (thread {thread!r}):", file=sys.stderr)
    config = memory.config_for(k=5)
    for q in asked:
        as_of = datetime.fromisoformat(q["as_of"]).replace(tzinfo=UTC) if q["as_of"] else None
        result = memory.query(q["question"], memory.scope_for(Caller(), as_of=as_of), config)
        top = result.selected[0].row if result.selected else None
        when = top.event_time.date().isoformat() if top and top.event_time else "-"
        line = " ".join(top.text.split())[:110] if top else "(nothing)"
        print(f"  as of {q['as_of'] or 'now':<10}  expected {q['answer']!r:<16} top row {when} {top.author if top else ''}"
              f"\n      {line}", file=sys.stderr)


def _demo_key(settings, memory) -> str:
    """Each demo start hands out a fresh reader key (audited like any other): the tokens of
    earlier ones are not kept."""
    from services.app.audit import create_key_audited
    from services.bootstrap import key_store_for

    store = key_store_for(settings)
    try:
        _, token = create_key_audited(store, memory.event_log, "default", "demo", "reader", "orgmem demo", name="demo")
    finally:
        store.close()
    return token


def cmd_demo(args) -> int:
    import uvicorn

    from services.api.app import create_app
    from services.app.connectors import run_connector
    from services.bootstrap import build_memory, open_event_log, private_data_folder
    from services.cli.common import print_progress, settings_from
    from services.demo.synthetic_org import generate

    started = time.perf_counter()
    settings = settings_from(args)
    if args.data is None:
        settings.data_dir = Path("demo-data")
    settings.port = args.port
    data = private_data_folder(Path(settings.data_dir))  # before the organization is written into it
    org = generate(data / "source", seed=args.seed)
    print(f"synthetic organization: {org.counts}", file=sys.stderr)
    event_log = open_event_log(settings)
    try:
        for kind, path in (("email", org.mbox), ("tickets", org.jira), ("meetings", org.meetings)):
            report, _ = run_connector(kind, [path], event_log, data)
            print(f"connector {kind}: {report.documents} new documents, {report.unchanged} unchanged inputs, "
                  f"{len(report.dead_letters)} dead letters", file=sys.stderr)
    finally:
        event_log.close()
    memory, lock = build_memory(settings)
    memory.catch_up(progress=print_progress)
    print(f"indexed in {time.perf_counter() - started:.0f} s since start: {memory.stats()}", file=sys.stderr)
    _walkthrough(memory, json.loads(org.questions_path.read_text()))

    def close() -> None:
        memory.close()
        lock.release()

    app = create_app(settings, memory, on_close=close)
    url = f"http://{settings.host}:{settings.port}"
    print(f"\norgmem demo serving on {url}  (API docs: {url}/docs)\n"
          f"  export ORGMEM_KEY={_demo_key(settings, memory)}   # a reader key for this demo, shown only now\n"
          f"  curl -s {url}/v1/query -H \"authorization: Bearer $ORGMEM_KEY\" -H 'content-type: application/json' "
          "-d '{\"q\": \"What is the travel class for long flights?\", \"as_of\": \"2025-06-01\", \"k\": 5}'\n"
          f"  questions with gold answers: {org.questions_path}", file=sys.stderr)
    if args.no_serve:
        close()
        return 0
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning")
    return 0


def register(command, sub) -> None:
    p = command("demo", cmd_demo, "generate the synthetic organization, ingest it with the connectors, serve it")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--no-serve", action="store_true", help="stop after the walkthrough")
