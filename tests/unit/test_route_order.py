"""The gateway's routers are tried in the order api/http/app.py lists them, hot routes first
for speed: that is safe only while no route of one router answers a request another
router's route answers too (then the order would decide which one serves it)."""

from __future__ import annotations

import re

from fastapi.routing import APIRoute

from api.http.app import create_app
from conf.settings import Settings

_PARAMETER = re.compile(r"\{[^}]+\}")


def routes_by_router() -> list[tuple[str, str, set[str], re.Pattern]]:
    """(router, path, methods, regex) of every route in the app's order; a route's router is
    the module that declares it (the app holds the routes themselves: api/http/app.py)."""
    app = create_app(Settings(data_dir="/nonexistent-never-started"))
    found = []
    for route in app.router.routes:
        endpoint = getattr(route, "endpoint", None)
        if isinstance(route, APIRoute) and endpoint.__module__.startswith("api.http.routes."):
            found.append((endpoint.__module__, route.path, set(route.methods), route.path_regex))
    return found


def test_no_two_routers_answer_the_same_request():
    routes = routes_by_router()
    assert len({router for router, *_ in routes}) > 10  # the routers were found
    clashes = []
    for router, path, methods, _ in routes:
        example = _PARAMETER.sub("p1", path)  # a request this route answers
        for other_router, other_path, other_methods, regex in routes:
            if other_router != router and methods & other_methods and regex.match(example):
                clashes.append((path, other_path, sorted(methods & other_methods)))
    assert clashes == []


def test_the_produce_routes_come_first():
    paths = [path for _, path, methods, _ in routes_by_router() if "POST" in methods]
    assert paths.index("/v3/clusters/{cluster_id}/topics/{topic}/records") < 5
    assert paths.index("/topics/{topic}") < 5
