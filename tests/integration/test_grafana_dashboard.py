"""conf/grafana/lakelog-dashboard.json only queries metrics a real gateway serves: every
`lakelog_*` name in its expressions is a family (or a histogram's/counter's series) of
`GET /metrics`, and the dashboard is the JSON Grafana imports (panels with targets)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.gateway

DASHBOARD = Path(__file__).resolve().parents[2] / "conf" / "grafana" / "lakelog-dashboard.json"
METRIC = re.compile(r"\blakelog_[a-z_]+")


def served_names(url: str) -> set[str]:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        if family.type == "counter":
            names.add(family.name + "_total")
        if family.type == "histogram":
            names |= {family.name + suffix for suffix in ("_bucket", "_count", "_sum")}
    return names


def test_every_metric_the_dashboard_uses_is_served(gateway):
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert dashboard["uid"] and len(expressions) >= 10
    used = {name for expr in expressions for name in METRIC.findall(expr)}
    missing = used - served_names(gateway.url)
    assert not missing, f"the dashboard queries metrics no gateway serves: {sorted(missing)}"
