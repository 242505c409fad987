"""A stand-in for a Qdrant server's REST API, for tests on a host where no Qdrant server runs.

This is NOT a Qdrant server. It is a small HTTP process over qdrant-client's local mode: each
request's JSON body is parsed into qdrant-client's own REST models (pydantic) and handed to the
same method of ONE `QdrantClient(path=DIR)` held by the process, one call at a time (a lock), and
the result goes back in Qdrant's envelope (`{"result": ..., "status": "ok", "time": ...}`; errors
as `{"status": {"error": ...}}` with 400, 404 or 409 as the server answers them). So the adapters'
HTTP path (URLs, bodies, the envelope, status codes, several processes on one collection) runs
for real, while search, filters, conditional upserts and aliases are local mode's behaviour.

    python -m tests.qdrant_rest --port 6333 --path /tmp/qdrant-standin

Routes are those qdrant-client's REST api modules (`qdrant_client/http/api/*.py`) call for what
orgmem uses: collections (exists, create, get, list, delete), payload indexes (accepted; local
mode has none), points (upsert incl. `update_filter`, batch update, retrieve, delete, set and
overwrite payload, scroll, count), query, and aliases (list, per collection, update).

Not implemented: gRPC, API keys, snapshots, sharding and replication, cluster and telemetry
endpoints, facets, grouped and batch queries, recommend/discover, vector updates, and collection
updates; of a collection's creation options only its vectors, sparse vectors and metadata are
kept. `wait`, `ordering` and `timeout` are ignored: local mode applies a write before it answers
(what `wait=true` asks). Payload indexes are accepted and do nothing, and search is exact, so
HNSW and ACORN parameters do nothing either: recall, latency and memory say nothing of a server.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import TypeAdapter, ValidationError
from pydantic_core import to_jsonable_python
from qdrant_client import QdrantClient
from qdrant_client.http import models as m

REPO = Path(__file__).resolve().parents[1]


class Refused(Exception):
    """A request answered with an HTTP error, as the server would."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def body_as(model, body: dict | None):
    """The JSON body as qdrant-client's REST model (a class or a Union); 400 as the server's
    'Format error in JSON body' when it does not fit."""
    try:
        return TypeAdapter(model).validate_python(body or {})
    except ValidationError as exc:
        raise Refused(400, f"Format error in JSON body: {exc.errors(include_url=False)}") from exc


def _update_result() -> m.UpdateResult:
    return m.UpdateResult(operation_id=0, status=m.UpdateStatus.COMPLETED)


class Handlers:
    """One method per route: (collection name or None, parsed JSON body) -> the `result`."""

    def __init__(self, client: QdrantClient):
        self.client = client

    # --- service and collections -------------------------------------------------------------

    def root(self, _name, _body):
        # The client compares major.minor with its own; the stand-in is its own local mode.
        return {"title": "qdrant REST stand-in over qdrant-client local mode", "version": version("qdrant-client")}

    def list_collections(self, _name, _body):
        return self.client.get_collections()

    def get_collection(self, name, _body):
        return self.client.get_collection(name)

    def collection_exists(self, name, _body):
        return m.CollectionExistence(exists=self.client.collection_exists(name))

    def create_collection(self, name, body):
        request = body_as(m.CreateCollection, body)
        return self.client.create_collection(
            name, vectors_config=request.vectors, sparse_vectors_config=request.sparse_vectors,
            metadata=request.metadata)

    def delete_collection(self, name, _body):
        return self.client.delete_collection(name)

    def create_field_index(self, name, body):
        request = body_as(m.CreateFieldIndex, body)
        self.client.create_payload_index(name, request.field_name, field_schema=request.field_schema)
        return _update_result()

    # --- aliases -----------------------------------------------------------------------------

    def list_aliases(self, _name, _body):
        return self.client.get_aliases()

    def collection_aliases(self, name, _body):
        return self.client.get_collection_aliases(name)

    def update_aliases(self, _name, body):
        request = body_as(m.ChangeAliasesOperation, body)
        return self.client.update_collection_aliases(change_aliases_operations=request.actions)

    # --- points ------------------------------------------------------------------------------

    def upsert(self, name, body):
        request = body_as(m.PointInsertOperations, body)
        points = request.points if isinstance(request, m.PointsList) else request.batch
        return self.client.upsert(name, points=points, update_filter=request.update_filter,
                                  update_mode=request.update_mode)

    def batch_update(self, name, body):
        request = body_as(m.UpdateOperations, body)
        return self.client.batch_update_points(name, request.operations)

    def retrieve(self, name, body):
        request = body_as(m.PointRequest, body)
        return self.client.retrieve(
            name, request.ids,
            with_payload=True if request.with_payload is None else request.with_payload,
            with_vectors=False if request.with_vector is None else request.with_vector)

    def delete_points(self, name, body):
        return self.client.delete(name, points_selector=body_as(m.PointsSelector, body))

    def _payload_selector(self, request: m.SetPayload):
        if request.points is not None:
            return m.PointIdsList(points=request.points)
        if request.filter is not None:
            return m.FilterSelector(filter=request.filter)
        raise Refused(400, "Wrong input: either `points` or `filter` is required")

    def set_payload(self, name, body):
        request = body_as(m.SetPayload, body)
        return self.client.set_payload(name, request.payload, self._payload_selector(request), key=request.key)

    def overwrite_payload(self, name, body):
        request = body_as(m.SetPayload, body)
        return self.client.overwrite_payload(name, request.payload, self._payload_selector(request))

    def scroll(self, name, body):
        request = body_as(m.ScrollRequest, body)
        records, next_offset = self.client.scroll(
            name, scroll_filter=request.filter, limit=request.limit or 10, order_by=request.order_by,
            offset=request.offset,
            with_payload=True if request.with_payload is None else request.with_payload,
            with_vectors=False if request.with_vector is None else request.with_vector)
        return m.ScrollResult(points=records, next_page_offset=next_offset)

    def count(self, name, body):
        request = body_as(m.CountRequest, body)
        return self.client.count(name, count_filter=request.filter, exact=request.exact is not False)

    def query(self, name, body):
        request = body_as(m.QueryRequest, body)
        return self.client.query_points(
            name, query=request.query, using=request.using, prefetch=request.prefetch,
            query_filter=request.filter, search_params=request.params, limit=request.limit or 10,
            offset=request.offset, score_threshold=request.score_threshold,
            with_payload=False if request.with_payload is None else request.with_payload,
            with_vectors=False if request.with_vector is None else request.with_vector,
            lookup_from=request.lookup_from)


NAME = r"(?P<name>[^/]+)"
# (method, path pattern, handler): the routes of qdrant_client/http/api/*.py that are served.
ROUTES: list[tuple[str, re.Pattern, Callable]] = [
    (method, re.compile(f"^{pattern}$"), handler)
    for method, pattern, handler in [
        ("GET", "/", Handlers.root),
        ("GET", "/collections", Handlers.list_collections),
        ("GET", "/aliases", Handlers.list_aliases),
        ("POST", "/collections/aliases", Handlers.update_aliases),
        ("GET", f"/collections/{NAME}", Handlers.get_collection),
        ("PUT", f"/collections/{NAME}", Handlers.create_collection),
        ("DELETE", f"/collections/{NAME}", Handlers.delete_collection),
        ("GET", f"/collections/{NAME}/exists", Handlers.collection_exists),
        ("GET", f"/collections/{NAME}/aliases", Handlers.collection_aliases),
        ("PUT", f"/collections/{NAME}/index", Handlers.create_field_index),
        ("PUT", f"/collections/{NAME}/points", Handlers.upsert),
        ("POST", f"/collections/{NAME}/points", Handlers.retrieve),
        ("POST", f"/collections/{NAME}/points/batch", Handlers.batch_update),
        ("POST", f"/collections/{NAME}/points/delete", Handlers.delete_points),
        ("POST", f"/collections/{NAME}/points/payload", Handlers.set_payload),
        ("PUT", f"/collections/{NAME}/points/payload", Handlers.overwrite_payload),
        ("POST", f"/collections/{NAME}/points/scroll", Handlers.scroll),
        ("POST", f"/collections/{NAME}/points/count", Handlers.count),
        ("POST", f"/collections/{NAME}/points/query", Handlers.query),
    ]
]


def _status_for(exc: ValueError) -> int:
    """Local mode raises ValueError for what the server refuses with 404, 409 or 400."""
    text = str(exc)
    if "not found" in text or "does not exist" in text:
        return 404
    if "already exists" in text:
        return 409
    return 400


def make_handler(handlers: Handlers, lock: threading.Lock) -> type[BaseHTTPRequestHandler]:
    class QdrantRequestHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as httpx expects of the server

        def _serve(self, method: str) -> None:
            started = time.perf_counter()
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            path = urlsplit(self.path).path.rstrip("/") or "/"
            try:
                route = next(((h, found) for verb, pattern, h in ROUTES
                              if verb == method and (found := pattern.match(path))), None)
                if route is None:
                    raise Refused(404, f"Not found: no route {method} {path} in the stand-in")
                handler, found = route
                try:
                    body = json.loads(raw) if raw else None
                except ValueError as exc:
                    raise Refused(400, f"Format error in JSON body: {exc}") from exc
                name = found.groupdict().get("name")
                with lock:
                    result = handler(handlers, name, body)
                if handler is Handlers.root:
                    self._answer(200, result)
                    return
                self._answer(200, {"result": to_jsonable_python(result), "status": "ok",
                                   "time": time.perf_counter() - started})
            except Refused as exc:
                self._error(exc.status, str(exc), started)
            except ValueError as exc:
                status = _status_for(exc)
                self._error(status, f"{'Not found' if status == 404 else 'Wrong input'}: {exc}", started)
            except Exception as exc:  # noqa: BLE001 - the server's 500: the client raises UnexpectedResponse
                self._error(500, f"Service internal error: {type(exc).__name__}: {exc}", started)

        def _error(self, status: int, message: str, started: float) -> None:
            self._answer(status, {"status": {"error": message}, "time": time.perf_counter() - started})

        def _answer(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._serve("GET")

        def do_POST(self):
            self._serve("POST")

        def do_PUT(self):
            self._serve("PUT")

        def do_DELETE(self):
            self._serve("DELETE")

        def log_message(self, format, *args):  # quiet: the tests read their own output
            pass

    return QdrantRequestHandler


class StandInServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        # A client that goes away with its keep-alive connection open is no error of ours.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def serve(port: int, path: Path, host: str = "127.0.0.1") -> None:
    # Local mode warns that payload indexes and search params do nothing there (said above).
    warnings.filterwarnings("ignore", message=r".*(Payload indexes have no effect|performs exact)")
    path.mkdir(parents=True, exist_ok=True)
    client = QdrantClient(path=str(path))
    server = StandInServer((host, port), make_handler(Handlers(client), threading.Lock()))
    try:
        server.serve_forever()
    finally:
        server.server_close()
        client.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def qdrant_rest_url(path: Path, timeout_s: float = 30.0) -> Iterator[str]:
    """Start the stand-in over the folder `path` on a free port; yields its URL once it answers,
    and kills the process on exit. Its output goes to `<path>.log` (a pipe nobody reads would
    fill and stall it)."""
    import httpx

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    path.parent.mkdir(parents=True, exist_ok=True)
    log_path = path.with_name(path.name + ".log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tests.qdrant_rest", "--port", str(port), "--path", str(path)],
                                cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the Qdrant stand-in exited: {log_path.read_text(errors='replace')[-2000:]}")
            try:
                if httpx.get(url + "/", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Qdrant stand-in did not answer within {timeout_s} s")
            time.sleep(0.1)
        yield url
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", type=Path, required=True, help="local mode's storage folder")
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    serve(args.port, args.path, args.host)


if __name__ == "__main__":
    main()
