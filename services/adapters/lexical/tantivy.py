"""LexicalIndex on tantivy (embedded, one directory per index).

The scope is compiled into non-scoring filter clauses of the same query that ranks, so every
returned slot is an eligible row. The queries themselves are built in `tantivy_query.py`.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import tantivy

from schemas.rows import Row
from services.adapters.lexical.tantivy_query import Queries, micros, schema
from services.core.scope import Scope, acl_tokens
from services.core.term_match import TermMatch
from services.core.text import normalise_tag
from services.errors import BackendUnavailable, OrgmemError
from services.ports import Hit

COMPONENT = "lexical index (tantivy)"

_WRITER_HEAP = 50_000_000
# Another process's write holds the directory lock for one commit (the cluster's shared folder:
# several indexers on one index), so a writer that finds it busy waits this long, then fails.
_LOCK_WAIT_S = 10.0
_LOCK_RETRY_S = 0.02
# The top-k is fetched with this much slack so that a tie straddling the k-th place is seen whole
# and broken by ingest position, not by tantivy's internal document order.
_TIE_SLACK = 16
# The first fetch is this many times k (plus the slack): tantivy scores every matching row
# whatever the fetch, so a larger one costs no measurable time (one search per question: lexical
# p50 15.0 ms at k + 16, 15.05 at k + 214, 200k rows), while a tie reaching past a short fetch
# costs a second, longer search (duplicated texts: forwarded mails, repeated notices). On the
# 200k-row store of `bench.live --scale 1m`, whose copies tie on 93 % of questions, lexical p50
# went from 24.3 to 15.7 ms with the same answers to all 150 questions.
_FIRST_FETCH = 4
# Where ties are longer still, the first fetch learns (_FirstFetch), up to this many rows.
_LEARNT_FETCH_MAX = 4096
_RELAX_AFTER = 100


class _FirstFetch:
    """How many rows a search fetches first, learnt from the ties of this index.

    The rows of a store with many identical texts tie at the cut on most questions, and each such
    tie past the first fetch cost a second search that scores every matching row again: at 1M rows
    of `bench.live --scale 1m` 126 of 150 questions searched twice (default preset, lexical p50
    22.5 ms against 13.0 with a first fetch of 16 k, the same answers to all 150). So after a search
    that had to widen, the next ones start at the fetch that sufficed (in rows: a tie is as long
    whatever the k), and after `_RELAX_AFTER` searches in a row that did not need it they start at
    `_FIRST_FETCH` k again: a larger fetch costs the rows it returns (+0.28 ms p50 at 100k rows,
    where no tie reaches past 4 k). The answer is the same whatever the fetch: a search stops only
    once its fetch reaches past the tie at k. Shared by the query threads without a lock: a lost
    update only costs one search's fetch size."""

    def __init__(self) -> None:
        self.learnt = 0  # rows; 0: none learnt
        self._calm = 0

    def rows(self, limit: int) -> int:
        return max(_FIRST_FETCH * limit + _TIE_SLACK, self.learnt)

    def learn(self, first: int, sufficed: int) -> None:
        """A search started at `first` rows and reached past the tie at `sufficed`."""
        if sufficed > first:
            self.learnt, self._calm = min(max(self.learnt, sufficed), _LEARNT_FETCH_MAX), 0
        elif self.learnt:
            self._calm += 1
            if self._calm >= _RELAX_AFTER:
                self.learnt, self._calm = 0, 0


def _row_tags(row: Row) -> list[str]:
    values = [row.author, row.thread or "", *row.participants, *row.tags]
    return sorted({tag for tag in (normalise_tag(v) for v in values) if tag})


@contextmanager
def _driver_errors(action: str) -> Iterator[None]:
    """The one place where tantivy's errors become ours."""
    try:
        yield
    except OrgmemError:
        raise
    except (ValueError, OSError, RuntimeError) as exc:
        detail = f"{action}: {exc}"
        text = str(exc)
        if isinstance(exc, OSError) or "LockBusy" in text or "IoError" in text or "Io(" in text:
            raise BackendUnavailable(COMPONENT, detail) from exc
        raise OrgmemError(f"{COMPONENT}: {detail}") from exc


class TantivyLexicalIndex:
    """BM25 text leg and tag leg over rows, with the scope applied inside the query."""

    def __init__(self, path: Path, lock_wait_s: float = _LOCK_WAIT_S):
        self._path = Path(path)
        self.lock_wait_s = lock_wait_s
        self._schema = schema()
        self._queries = Queries(self._schema)
        # One writer at a time within this process; other processes are kept out by tantivy's
        # lock, which is only held for the duration of a write call (a writer waits for it: _writer).
        self._write_lock = threading.Lock()
        try:
            self._path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BackendUnavailable(COMPONENT, f"cannot create {self._path}: {exc}") from exc
        with _driver_errors(f"open {self._path}"):
            self._index: tantivy.Index | None = tantivy.Index(self._schema, str(self._path), reuse=True)
            # Reloaded by each search when the index changed, so commits by another process are
            # visible at once instead of after a file-watch delay.
            self._index.config_reader(reload_policy="manual")
        self._loaded: tuple | None = None  # the meta.json the searcher last reloaded
        self._first_fetch = _FirstFetch()

    # -- writes -----------------------------------------------------------------------------

    def upsert(self, rows: Sequence[Row]) -> None:
        """Index or re-index rows in their current state; one commit; durable on return.

        A row that cannot be turned into a document is reported in an OrgmemError raised after
        the rest of the batch has been committed.
        """
        latest: dict[str, tuple[int, Row]] = {}
        problems: list[str] = []
        for i, row in enumerate(rows):
            row_id = getattr(row, "row_id", None)
            if not isinstance(row, Row) or not isinstance(row_id, str):
                problems.append(f"rows[{i}]: expected a Row, got {type(row).__name__}")
                continue
            latest[row_id] = (i, row)  # the last version of a row in a batch wins
        if not latest:
            if problems:
                raise OrgmemError(f"{COMPONENT}: upsert rejected " + "; ".join(problems))
            return
        documents: list[tuple[str, tantivy.Document]] = []
        for row_id, (i, row) in latest.items():
            try:
                documents.append((row_id, self._document(row)))
            except (ValueError, TypeError, OverflowError) as exc:
                problems.append(f"rows[{i}] (row_id={row_id!r}): {exc}")

        def write(writer: tantivy.IndexWriter) -> None:
            for row_id, document in documents:
                writer.delete_documents_by_term("row_id", row_id)
                writer.add_document(document)

        self._write("upsert", write)
        if problems:
            raise OrgmemError(f"{COMPONENT}: upsert skipped " + "; ".join(problems))

    def reset(self) -> None:
        """Remove every document (a rebuild replays the log into the empty index)."""
        self._write("reset", lambda writer: writer.delete_all_documents())

    def delete(self, row_ids: Sequence[str], survivors: Callable[[], Iterable[Row]]) -> None:
        """Erase rows so that no segment keeps their terms. A tantivy delete only marks documents;
        their terms stay in the segment's dictionary until a merge that tantivy-py cannot ask
        for. So the index is rewritten from `survivors` (every other row) in one commit, and the
        old segment files are collected: searchers see the old index, then the new one."""
        gone = set(row_ids)

        def rewrite(writer: tantivy.IndexWriter) -> None:
            writer.delete_all_documents()
            for row in survivors():
                if row.row_id not in gone:
                    writer.add_document(self._document(row))

        self._write("delete", rewrite)
        with self._write_lock, _driver_errors("collect erased segments"):
            writer = self._writer(self._open_index())
            try:
                writer.garbage_collect_files()
                writer.wait_merging_threads()
            finally:
                writer = None  # noqa: F841  (releases the directory lock)

    def count(self) -> int:
        with _driver_errors("count"):
            return self._searcher().num_docs

    def close(self) -> None:
        self._index = None

    def _document(self, row: Row) -> tantivy.Document:
        fields: dict[str, object] = {
            "row_id": row.row_id, "tenant": row.tenant, "acl": acl_tokens(row.acl), "state": row.state,
            "kind": row.kind, "author": row.author, "text": row.text,
            "ingested_at": micros("ingested_at", row.ingested_at), "ingest_position": row.ingest_position,
        }
        if row.thread is not None:
            fields["thread"] = row.thread
        if row.title:
            fields["title"] = row.title
        if row.event_time is not None:
            fields["event_time"] = micros("event_time", row.event_time)
        tags = _row_tags(row)
        if tags:
            fields["tag"] = tags
        return tantivy.Document(**fields)

    def _write(self, action: str, operation) -> None:
        index = self._open_index()
        with self._write_lock, _driver_errors(action):
            writer = self._writer(index)
            try:
                operation(writer)
                writer.commit()
                # Finish merges now: the writer (and the directory lock) is released on return,
                # and an abandoned merge would leave small segments piling up.
                writer.wait_merging_threads()
            except BaseException:
                try:
                    writer.rollback()
                except ValueError:
                    pass  # already consumed by wait_merging_threads; nothing to roll back
                raise
            finally:
                # Drop our only reference so the lock is released even while a traceback that
                # holds this frame is still alive.
                writer = None  # noqa: F841
            self._reload(index)

    def _writer(self, index: tantivy.Index) -> tantivy.IndexWriter:
        """A writer, once the directory lock is free: while another process holds it (its
        writes take one commit) this waits up to `_LOCK_WAIT_S`, then LockBusy goes up."""
        deadline = time.monotonic() + self.lock_wait_s
        while True:
            try:
                return index.writer(heap_size=_WRITER_HEAP, num_threads=1)
            except ValueError as exc:
                if "LockBusy" not in str(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(_LOCK_RETRY_S)

    # -- reads ------------------------------------------------------------------------------

    def search_text(self, terms: Sequence[str], scope: Scope, limit: int, match: TermMatch) -> list[Hit]:
        if limit <= 0:
            return []
        with _driver_errors("search_text"):
            searcher = self._searcher()
            ranking = self._queries.text(terms, match, searcher)
            return self._search(searcher, ranking, scope, limit) if ranking is not None else []

    def search_tags(self, candidates: Sequence[str], scope: Scope, limit: int) -> list[Hit]:
        if limit <= 0:
            return []
        tags = sorted({tag for tag in (normalise_tag(c) for c in candidates) if tag})
        if not tags:
            return []
        with _driver_errors("search_tags"):
            searcher = self._searcher()
            total = searcher.num_docs
            # Each matched tag adds its BM25 idf (Queries.tags).
            idf_of: dict[str, float] = {}
            for tag in tags:
                frequency = searcher.doc_freq("tag", tag)
                if frequency > 0:
                    idf_of[tag] = math.log(1.0 + (total - frequency + 0.5) / (frequency + 0.5))
            if not idf_of:
                return []
            return self._search(searcher, self._queries.tags(idf_of), scope, limit,
                                lambda score: self._queries.tag_subset(idf_of, score))

    def _searcher(self) -> tantivy.Searcher:
        index = self._open_index()
        # A reload costs about 0.4 ms, twice per query. Every commit, in any process, rewrites
        # meta.json, so an unchanged meta.json means there is nothing new to load. A file changed
        # within the last two seconds is reloaded regardless, in case the file system keeps
        # coarse modification times.
        stamp = self._meta_stamp()
        if stamp is None or stamp != self._loaded or time.time() - stamp[1] / 1e9 < 2.0:
            self._reload(index, stamp)
        return index.searcher()

    def _reload(self, index: tantivy.Index, stamp: tuple | None = None) -> None:
        # The stamp is read before the reload: a commit in between only makes the next search
        # reload again.
        stamp = stamp or self._meta_stamp()
        index.reload()
        self._loaded = stamp

    def _meta_stamp(self) -> tuple | None:
        try:
            meta = os.stat(self._path / "meta.json")
        except OSError:
            return None
        return meta.st_ino, meta.st_mtime_ns, meta.st_size

    def _search(self, searcher: tantivy.Searcher, ranking: tantivy.Query, scope: Scope, limit: int,
                tie_rows: Callable[[float], tantivy.Query | None] | None = None) -> list[Hit]:
        """The best `limit` rows by score, ties to the later ingest position. `tie_rows(score)`,
        when given, names the rows of exactly that score, so that a long tie at the k-th place is
        read newest first (ordered by tantivy) instead of whole."""
        scope_filter = self._queries.scope_filter(scope)
        query = tantivy.Query.boolean_query([(tantivy.Occur.Must, ranking), (tantivy.Occur.Must, scope_filter)])
        first = fetch = self._first_fetch.rows(limit)
        while True:
            hits = searcher.search(query, limit=fetch, count=False).hits
            # Stop once the fetch reaches past the k-th score, or everything that matches is here.
            if len(hits) < fetch or hits[-1][0] != hits[limit - 1][0]:
                break
            if tie_rows is not None:  # asked once: the tied score stays the same as the fetch grows
                tie = hits[limit - 1][0]
                exact, tie_rows = tie_rows(tie), None
                if exact is not None:
                    return self._with_newest_of_tie(searcher, hits, tie, exact, scope_filter, limit)
            fetch *= 4
        self._first_fetch.learn(first, fetch)
        addresses = [address for _, address in hits]
        positions = searcher.fast_field_values("ingest_position", addresses)
        return self._ranked(searcher, [score for score, _ in hits], positions, addresses, limit)

    def _with_newest_of_tie(self, searcher: tantivy.Searcher, hits: list, tie: float, exact: tantivy.Query,
                            scope_filter: tantivy.Query, limit: int) -> list[Hit]:
        # Every row above the tie is in `hits` (they are sorted by score); the tie's newest rows
        # come from tantivy ordered by ingest position, descending.
        above = [(score, address) for score, address in hits if score > tie]
        tied_query = tantivy.Query.boolean_query([(tantivy.Occur.Must, exact), (tantivy.Occur.Must, scope_filter)])
        newest = searcher.search(tied_query, limit=limit - len(above) + _TIE_SLACK, count=False,
                                 order_by_field="ingest_position", order=tantivy.Order.Desc).hits
        addresses = [address for _, address in above] + [address for _, address in newest]
        positions = searcher.fast_field_values("ingest_position", [address for _, address in above])
        positions += [position for position, _ in newest]
        scores = [score for score, _ in above] + [tie] * len(newest)
        return self._ranked(searcher, scores, positions, addresses, limit)

    @staticmethod
    def _ranked(searcher: tantivy.Searcher, scores: list[float], positions: list, addresses: list,
                limit: int) -> list[Hit]:
        # Ties on the k-th score can be thousands of rows long (an author tag matches every row
        # the author wrote, all with one score), so they are ordered in numpy, not in Python.
        n = len(addresses)
        score_of = np.fromiter(scores, np.float64, n)
        position_of = np.fromiter((p or 0 for p in positions), np.int64, n)
        order = np.lexsort((-position_of, -score_of))  # score, then most recently ingested, first
        score_of, position_of = score_of[order], position_of[order]
        # Row ids are only read for the slots returned, plus any rows tied with the last one.
        end = min(limit, n)
        while end < n and score_of[end] == score_of[end - 1] and position_of[end] == position_of[end - 1]:
            end += 1
        chosen = [
            (score_of[i], position_of[i], searcher.doc(addresses[order[i]])["row_id"][0]) for i in range(end)
        ]
        chosen.sort(key=lambda item: (-item[0], -item[1], item[2]))
        return [Hit(row_id, float(score)) for score, _, row_id in chosen[:limit]]

    def _open_index(self) -> tantivy.Index:
        if self._index is None:
            raise OrgmemError(f"{COMPONENT}: index at {self._path} is closed")
        return self._index
