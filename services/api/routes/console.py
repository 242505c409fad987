"""GET /console: the web console, static files shipped in the package (services/api/console/static).

The pages hold no data: the browser calls the same HTTP API as every other client, with the API
key the user typed (kept in sessionStorage, sent as `Authorization: Bearer`). So these routes need
no credentials, and each answer carries a strict Content-Security-Policy: scripts and styles from
this origin only, nothing inline, no frames, no other origin to talk to.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from services.api.problems import ApiProblem

STATIC = Path(__file__).resolve().parents[1] / "console" / "static"
MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
               ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
           "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Resource-Policy": "same-origin",
           "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
# Only the files shipped are served, by exact name: a path never reaches the file system.
ASSETS = {p.name: p for p in STATIC.iterdir() if p.is_file() and p.suffix in MEDIA_TYPES} if STATIC.is_dir() else {}

router = APIRouter(tags=["console"], include_in_schema=False)


def _asset(name: str) -> Response:
    path = ASSETS.get(name)
    if path is None:
        raise ApiProblem(404, "Not found", f"console: no file {name!r}", "not-found")
    return Response(path.read_bytes(), media_type=MEDIA_TYPES[path.suffix], headers=HEADERS)


@router.get("/console")
def console() -> Response:
    return _asset("index.html")


@router.get("/console/")
def console_slash() -> RedirectResponse:
    return RedirectResponse("/console", status_code=308)


@router.get("/console/{name}")
def console_asset(name: str) -> Response:
    return _asset(name)
