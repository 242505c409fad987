"""The people directory's cold build at scale: reading every readable row with and without its
text, then `services.core.people.build`, on a SQLite row store of --rows synthetic rows (the
same store, alternating, best of --repeats). Run: `python -m bench.people_directory --rows 100000`;
with `--only with` or `--only without` one way alone, so the peak RSS printed is that way's.
Then what one cached directory holds (`services.app.people.Directory` over the rows read without
their texts, as the server builds it): its bytes, the objects it adds to what Python's collector
tracks, and a full collection's time with it (the server's cache keeps one per reader).

The rows are written through the store's own `apply` (no encoder, no log): what is measured is the
read the directory does on every cold build, not ingest.
"""

from __future__ import annotations

import argparse
import gc
import random
import resource
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

from schemas.rows import Row, RowChange
from services.adapters.row_store.sqlite import SqliteRowStore
from services.core.people import build
from services.core.scope import Scope
from services.ports import RowMutation

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def fill(store: SqliteRowStore, rows: int, text_chars: int, people: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    names = [(f"Person {n}", f"person{n}@org.example") for n in range(people)]
    words = "decision vendor contract release policy budget review meeting ticket outage".split()
    batch: list[RowMutation] = []
    for i in range(1, rows + 1):
        who = rng.sample(names, 4)
        text = " ".join(rng.choice(words) for _ in range(text_chars // 8))[:text_chars]
        row = Row(row_id=f"r{i}", tenant="t", text=text, author=who[0][1], kind=rng.choice(["email", "meeting", "ticket"]),
                  participants=[w[1] for w in who[1:]] + [f"{who[0][0]} <{who[0][1]}>"], ingest_position=i,
                  ingested_at=T0 + timedelta(seconds=i), event_time=T0 + timedelta(minutes=i), title=f"Thread {i % 500}")
        batch.append(RowMutation(row=row, change=RowChange(position=i, at=row.ingested_at, change="observed",
                                                           state="active")))
        if len(batch) == 5000 or i == rows:
            store.apply(batch, [], i)
            batch = []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--text-chars", type=int, default=1500, help="characters of each row's text")
    parser.add_argument("--people", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=("with", "without"), help="read only with or only without the texts")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="orgmem-people-dir-") as folder:
        store = SqliteRowStore(Path(folder) / "rows.sqlite")
        started = time.perf_counter()
        fill(store, args.rows, args.text_chars, args.people)
        print(f"{args.rows:,} rows of {args.text_chars} characters written in {time.perf_counter() - started:.1f} s")
        best = {True: float("inf"), False: float("inf")}
        built = float("inf")
        for _ in range(args.repeats):
            for with_text in [w for w in (True, False) if args.only in (None, "with" if w else "without")]:
                started = time.perf_counter()
                rows = store.in_scope(Scope("t"), with_text=with_text)
                best[with_text] = min(best[with_text], time.perf_counter() - started)
            started = time.perf_counter()
            persons = build(rows)
            built = min(built, time.perf_counter() - started)
            del rows
        cached = cached_cost(store)
        store.close()
    shown = {True: "with its text", False: "without"}
    print("read every row " + "; ".join(f"{shown[w]}: {best[w]:.2f} s" for w in best if best[w] < float("inf"))
          + f"; build() over them: {built:.2f} s, {len(persons)} persons "
          f"(best of {args.repeats}); peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    print(cached)
    return 0


def cached_cost(store: SqliteRowStore) -> str:
    from services.app.people import Directory

    gc.collect()
    tracked, bare = len(gc.get_objects()), collection_ms()
    tracemalloc.start()
    rows = store.in_scope(Scope("t"), with_text=False)
    directory = Directory(rows)
    del rows  # the server keeps the directory, not the rows it was built from
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    gc.collect()
    added = len(gc.get_objects()) - tracked
    return (f"one cached directory: {held / 2**20:.0f} MiB, {added:,} more objects tracked by the collector; "
            f"a full collection {collection_ms():.0f} ms with it, {bare:.0f} ms before ({len(directory.persons)} persons)")


def collection_ms(repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        gc.collect()
        times.append((time.perf_counter() - started) * 1000)
    return min(times)


if __name__ == "__main__":
    raise SystemExit(main())
