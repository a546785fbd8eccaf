"""The web console at `/ui`: static files (ES modules, no build step) that call the gateway's
own REST API from the browser with the signed-in API key.

The files hold no data, so they are public; every request they make is authenticated and
authorized like any client's (a topic the key may not DESCRIBE is not listed, a config change
needs ALTER_CONFIGS). The strict Content-Security-Policy forbids inline scripts and other
origins: keys and values from the log are shown as text, never run.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from starlette.responses import RedirectResponse, Response

from api.http.errors import ApiError

router = APIRouter(include_in_schema=False)

CONSOLE_DIR = Path(__file__).resolve().parent.parent / "console"
MEDIA_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
# Read once: the console is part of the release, like the code that serves it.
ASSETS = {
    path.name: (path.read_bytes(), MEDIA_TYPES[path.suffix])
    for path in sorted(CONSOLE_DIR.iterdir())
    if path.suffix in MEDIA_TYPES
}


@router.get("/ui")
async def console_root() -> Response:
    return RedirectResponse("/ui/", status_code=308)


@router.get("/ui/")
async def console_index() -> Response:
    return _asset("index.html")


@router.get("/ui/{name}")
async def console_asset(name: str) -> Response:
    return _asset(name)


def _asset(name: str) -> Response:
    if name not in ASSETS:
        raise ApiError(404, 404, f"The console has no file '{name}'.")
    content, media_type = ASSETS[name]
    headers = {
        "Content-Security-Policy": CONTENT_SECURITY_POLICY,
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "no-cache",  # a new release is picked up at the next load
    }
    return Response(content, media_type=f"{media_type}; charset=utf-8", headers=headers)
