"""The gateway's routers are tried in the order api/http/app.py lists them, hot routes first
for speed: that is safe only while no route of one router answers a request another
router's route answers too (then the order would decide which one serves it)."""

from __future__ import annotations

import re

from api.http.app import create_app
from conf.settings import Settings

_PARAMETER = re.compile(r"\{[^}]+\}")


def routes_by_router() -> list[tuple[int, str, set[str], re.Pattern]]:
    app = create_app(Settings(data_dir="/nonexistent-never-started"))
    found = []
    for index, route in enumerate(app.router.routes):
        router = getattr(route, "original_router", None)
        for inner in router.routes if router is not None else [route]:
            if getattr(inner, "path", None) is not None:
                found.append((index, inner.path, set(inner.methods or ()), inner.path_regex))
    return found


def test_no_two_routers_answer_the_same_request():
    routes = routes_by_router()
    assert len({index for index, *_ in routes}) > 10  # the routers were found
    clashes = []
    for index, path, methods, _ in routes:
        example = _PARAMETER.sub("p1", path)  # a request this route answers
        for other_index, other_path, other_methods, regex in routes:
            if other_index != index and methods & other_methods and regex.match(example):
                clashes.append((path, other_path, sorted(methods & other_methods)))
    assert clashes == []


def test_the_produce_routes_come_first():
    paths = [path for _, path, methods, _ in routes_by_router() if "POST" in methods]
    assert paths.index("/v3/clusters/{cluster_id}/topics/{topic}/records") < 5
    assert paths.index("/topics/{topic}") < 5
