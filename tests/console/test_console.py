"""The web console in a real browser (headless Chromium over the DevTools protocol) against a
real gateway process: each page renders what the REST API says about a produced topic, a
lagging group and the maintenance runs; topics are created and configs changed through the
forms; with authentication on, the console signs in with an API key and shows only what the
key's ACLs allow. Screenshots go to LAKELOG_SCREENSHOT_DIR when set (the README's images)."""

from __future__ import annotations

import http.client
import json
import os
import time
from pathlib import Path

import httpx
import pytest

from tests.browser import Browser, Page
from tests.gateway_process import start_gateway
from tests.integration.helpers import V3, b64, create_topic, produce
from tests.integration.test_cluster import wait_for
from tests.security.helpers import AUTH_ENV, add_acl, bearer, make_keys

pytestmark = pytest.mark.gateway

CONSOLE_ENV = {
    "LAKELOG_LAG_SAMPLE_INTERVAL_MS": "300",
    "LAKELOG_MAINTENANCE": "true",
    "LAKELOG_RETENTION_INTERVAL_MS": "500",
}
V2 = "application/vnd.kafka.v2+json"
ORDERS_START_MS = int(time.time() * 1000) - 3_600_000  # an hour ago, a record a minute


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    started = Browser(tmp_path_factory.mktemp("chromium-profile"))
    yield started
    started.close()


@pytest.fixture
def page(browser) -> Page:
    opened = browser.new_page()
    yield opened
    problems = opened.problems()
    opened.close()
    assert problems == []  # no script errors, no refused resources, no CSP refusals


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """A gateway with `orders` (3 partitions of JSON orders, keyed, with headers, and one
    binary record), a group `billing` that committed part of it, and an expired topic."""
    gateway = start_gateway(tmp_path_factory.mktemp("console") / "data", env=CONSOLE_ENV)
    client = httpx.Client(base_url=gateway.url, timeout=30)
    create_topic(client, "orders", partitions=3)
    for partition in range(3):
        records = [
            {
                "key": b64(json.dumps({"customer": f"c{n}"})),
                "value": b64(json.dumps({"item": f"book-{n}", "qty": n + 1})),
                "headers": [{"key": "source", "value": b64("web")}],
                "timestamp": ORDERS_START_MS + n * 60_000,
            }
            for n in range(4 + partition)
        ]
        assert produce(client, "orders", records, partition=partition).status_code == 200
    binary = [{"key": None, "value": b64(bytes([0, 1, 2, 255]))}]
    assert produce(client, "orders", binary, partition=0).status_code == 200
    commit_offsets(client, "billing", "orders", {0: 2, 1: 5, 2: 1})
    expiring = {"retention.ms": "1", "segment.ms": "1"}  # each append opens a segment
    create_topic(client, "clickstream-expired", partitions=1, **expiring)
    old = [{"value": b64("old"), "timestamp": 1_000} for _ in range(3)]
    assert produce(client, "clickstream-expired", old).status_code == 200
    time.sleep(0.01)  # the next append rolls a new segment, so the first is closed and expires
    assert produce(client, "clickstream-expired", [{"value": b64("new")}]).status_code == 200
    yield gateway, client
    client.close()
    gateway.stop()


def commit_offsets(client: httpx.Client, group: str, topic: str, offsets: dict[int, int]):
    """Commit `offsets` (next offset to read) through a v2 consumer instance."""
    body = {"name": "console-c1", "format": "binary", "auto.commit.enable": "false"}
    created = client.post(f"/consumers/{group}", json=body, headers={"Content-Type": V2})
    assert created.status_code == 200, created.text
    instance = f"/consumers/{group}/instances/console-c1"
    subscribed = client.post(f"{instance}/subscription", json={"topics": [topic]})
    assert subscribed.status_code == 204, subscribed.text
    # v2 commits name the last consumed offset
    last = [{"topic": topic, "partition": p, "offset": o - 1} for p, o in offsets.items()]
    assert client.post(f"{instance}/offsets", json={"offsets": last}).status_code == 200


def open_console(page: Page, url: str, route: str, ready: str) -> None:
    """Load the console afresh at `route` (a hash change alone would keep the old page's
    elements around until the new one renders)."""
    page.goto("about:blank")
    page.wait_for("location.href === 'about:blank'")
    page.goto(f"{url}/ui/#{route}")
    page.wait_for(ready, what=f"{route} to render")


def shoot(page: Page, name: str, tmp_path: Path) -> None:
    target = Path(os.environ.get("LAKELOG_SCREENSHOT_DIR") or tmp_path)
    page.screenshot(target / f"console-{name}.png")
    assert (target / f"console-{name}.png").stat().st_size > 10_000


def rows_ready(selector: str, count: int = 1) -> str:
    return f"document.querySelectorAll('{selector} tbody tr td:not(.muted)').length >= {count}"


def test_topics_page_lists_topics_with_records_and_size(shop, page, tmp_path):
    gateway, _ = shop
    open_console(page, gateway.url, "/topics", rows_ready("#topics"))
    rows = {row[0]: row for row in page.rows("#topics")}
    assert rows["orders"][1:4] == ["3", "16", "16"]  # partitions, records, offsets written
    assert rows["orders"][4].endswith("KiB")
    shoot(page, "topics", tmp_path)


def test_topic_page_shows_partitions_leaders_bounds_and_configs(shop, page, tmp_path):
    gateway, _ = shop
    open_console(page, gateway.url, "/topics/orders", rows_ready("#configs", 5))
    partitions = page.rows("#partitions")
    assert [row[:6] for row in partitions] == [
        ["0", "node 0", "0", "5", "5", "5"],
        ["1", "node 0", "0", "5", "5", "5"],
        ["2", "node 0", "0", "6", "6", "6"],
    ]
    configs = {row[0]: row for row in page.rows("#configs")}
    assert configs["cleanup.policy"][2] == "DEFAULT_CONFIG"
    shoot(page, "topic", tmp_path)


def test_config_change_and_topic_creation_go_through_the_api(shop, page):
    gateway, client = shop
    open_console(page, gateway.url, "/topics/orders", rows_ready("#configs", 5))
    page.fill("#configs input[name='retention.ms']", "7200000")  # keeps the hour-old orders
    page.click("#configs button[data-config='retention.ms']")
    page.wait_for("!document.getElementById('banner').hidden", what="the change to be confirmed")
    stored = client.get(f"{V3}/topics/orders/configs/retention.ms").json()
    assert (stored["value"], stored["source"]) == ("7200000", "DYNAMIC_TOPIC_CONFIG")

    open_console(page, gateway.url, "/topics", rows_ready("#topics"))
    page.fill("#create-topic input[name=topic_name]", "made-in-console")
    page.fill("#create-topic input[name=partitions_count]", "2")
    page.fill("#create-topic input[name=configs]", "cleanup.policy=compact")
    page.evaluate("document.getElementById('create-topic').requestSubmit()")
    page.wait_for(rows_ready("#partitions", 2), what="the new topic's page")
    created = client.get(f"{V3}/topics/made-in-console").json()
    assert created["partitions_count"] == 2
    policy = client.get(f"{V3}/topics/made-in-console/configs/cleanup.policy").json()
    assert policy["value"] == "compact"

    open_console(page, gateway.url, "/topics", rows_ready("#topics"))
    page.fill("#create-topic input[name=topic_name]", "made-in-console")
    page.evaluate("document.getElementById('create-topic').requestSubmit()")
    error = page.wait_for(
        "!document.getElementById('banner').hidden && document.getElementById('banner').innerText"
    )
    assert "already exists" in error and "40002" in error


def test_groups_pages_show_state_lag_per_partition_and_lag_over_time(shop, page, tmp_path):
    gateway, client = shop
    open_console(page, gateway.url, "/groups", rows_ready("#groups"))
    (row,) = [r for r in page.rows("#groups") if r[0] == "billing"]
    assert row[1:3] == ["STABLE", "classic"] and row[5:] == ["8", "5"]  # lags 3, 0 and 5

    open_console(page, gateway.url, "/groups/billing", rows_ready("#lags", 3))
    lags = sorted(page.rows("#lags"), key=lambda r: r[1])
    assert [r[1:5] for r in lags] == [
        ["0", "2", "5", "3"],
        ["1", "5", "5", "0"],
        ["2", "1", "6", "5"],
    ]
    assert page.text("#total-lag") == "8"
    assert page.text("#group-type") == "classic"
    (member,) = page.rows("#members")
    assert member[3].split() == ["orders-0", "orders-1", "orders-2"]
    # the chart: a total line with the coordinator's samples; more arrive while it is open
    total_path = "#lag-chart path[data-series='total lag']"
    page.wait_for(f'document.querySelector("{total_path}")', what="the lag chart")
    more = [{"value": b64(f"late-{n}")} for n in range(4)]
    assert produce(client, "orders", more, partition=1).status_code == 200
    page.wait_for("document.getElementById('total-lag').innerText === '12'", what="a refresh")
    segments = page.evaluate(f"document.querySelector(\"{total_path}\").getAttribute('d')")
    assert segments.count("L") >= 1  # at least two samples drawn
    shoot(page, "group", tmp_path)


def test_share_group_pages_show_partitions_by_state_and_members(shop, page, tmp_path):
    gateway, client = shop
    share = "/v3/clusters/lakelog/share-groups/workers"
    configs = {"data": [{"name": "share.auto.offset.reset", "value": "earliest"}]}
    assert client.post(f"{share}/configs:alter", json=configs).status_code == 204
    body = {"topics": ["orders"], "max_records": 5, "timeout_ms": 0, "lock_duration_ms": 600000}
    taken = client.post(f"{share}/records:acquire", json=body).json()["records"]
    assert len(taken) == 5
    rejected = {"acknowledgements": [{"delivery_id": taken[0]["delivery_id"], "type": "reject"}]}
    assert client.post(f"{share}/records:acknowledge", json=rejected).status_code == 200

    open_console(page, gateway.url, "/shares", rows_ready("#share-groups"))
    assert ["workers"] in page.rows("#share-groups")
    open_console(page, gateway.url, "/shares/workers", rows_ready("#share-partitions"))
    assert page.text("#share-acquired") == "4"
    assert page.text("#share-state") == "Empty"
    rows = page.rows("#share-partitions")
    assert sum(int(r[5]) for r in rows) == 4  # acquired, per partition
    shoot(page, "share-group", tmp_path)


def test_a_page_left_before_it_loaded_never_replaces_the_next_one(shop, page):
    """The group page (which refreshes itself) is left at once for the topics: it neither
    shows up late nor keeps refreshing over the topics."""
    gateway, _ = shop
    open_console(page, gateway.url, "/topics", rows_ready("#topics"))
    page.evaluate(  # the group page starts loading, then the user goes on at once
        "(async () => { location.hash = '#/groups/billing';"
        " await new Promise((resolve) => setTimeout(resolve, 5)); location.hash = '#/topics'; })()"
    )
    page.wait_for(rows_ready("#topics"), what="the topics")
    time.sleep(6)  # longer than the group page's refresh (5 s)
    assert page.evaluate("!!document.getElementById('topics') && !document.getElementById('lags')")


def test_message_browser_seeks_by_offset_and_timestamp_and_shows_formats(shop, page, tmp_path):
    gateway, _ = shop
    route = "/topics/orders/messages?partition=0&offset=0&count=10"
    open_console(page, gateway.url, route, rows_ready("#messages", 5))
    rows = page.rows("#messages")
    assert [r[0] for r in rows] == ["0", "1", "2", "3", "4"]
    assert json.loads(rows[1][3]) == {"item": "book-1", "qty": 2}  # pretty JSON
    assert json.loads(rows[1][2]) == {"customer": "c1"}
    assert rows[1][4] == "source: web"
    assert rows[4][2] == "null" and rows[4][3] == "00 01 02 ff"  # not UTF-8: hex
    shoot(page, "messages", tmp_path)

    open_console(
        page,
        gateway.url,
        route.replace("count=10", "count=10&format=hex"),
        rows_ready("#messages", 5),
    )
    assert page.rows("#messages")[0][4] == "source: 77 65 62"

    since = ORDERS_START_MS + 3 * 60_000 - 1  # just before the record at offset 3
    route = f"/topics/orders/messages?partition=0&timestamp={since}&count=10"
    open_console(page, gateway.url, route, rows_ready("#messages"))
    assert page.rows("#messages")[0][0] == "3"

    open_console(
        page, gateway.url, "/topics/orders/messages?partition=2&count=2", rows_ready("#messages", 2)
    )
    assert [r[0] for r in page.rows("#messages")] == ["4", "5"]  # the newest two


def test_nodes_and_maintenance_pages(shop, page, tmp_path):
    gateway, client = shop
    open_console(page, gateway.url, "/nodes", rows_ready("#nodes"))
    (node,) = page.rows("#nodes")
    assert node[0] == "0" and node[1].startswith("127.0.0.1:")
    assert "orders-0" in node[3].split() and int(node[2]) >= 4
    shoot(page, "nodes", tmp_path)

    # retention (every 500 ms) removes the three expired records, the change is listed
    expired = "/topics/clickstream-expired/partitions/0/offsets"
    wait_for(
        lambda: client.get(expired).json()["beginning_offset"] == 3,
        30,
        "retention to remove the expired segment",
    )
    open_console(page, gateway.url, "/maintenance", rows_ready("#runs"))
    assert [row[0] for row in page.rows("#intervals")] == [
        "retention", "compact-keys", "optimize-files", "vacuum"
    ]  # fmt: skip
    changes = [r[1:5] for r in page.rows("#runs")]
    assert ["retention", "clickstream-expired-0", "committed", "3"] in changes
    assert all(change[2] != "nothing to do" for change in changes)
    shoot(page, "maintenance", tmp_path)

    open_console(page, gateway.url, "/maintenance?all=1", rows_ready("#runs"))
    assert any(r[3] == "nothing to do" for r in page.rows("#runs"))  # orders: nothing expired


# ---- authentication and ACLs ---------------------------------------------------------------


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("console-auth") / "data"
    keys = make_keys(data_dir, "admin", "viewer")
    gateway = start_gateway(data_dir, env={**AUTH_ENV, **CONSOLE_ENV})
    admin = bearer(gateway.url, keys["admin"])
    for name in ("visible", "hidden"):
        assert admin.post(f"{V3}/topics", json={"topic_name": name}).status_code == 201
    add_acl(admin, "User:viewer", "DESCRIBE", "visible")
    add_acl(admin, "User:viewer", "DESCRIBE_CONFIGS", "visible")
    viewer = bearer(gateway.url, keys["viewer"])
    wait_for(  # the gateway's ACL cache picks them up
        lambda: viewer.get(f"{V3}/topics/visible").status_code == 200, 30, "the viewer's ACLs"
    )
    viewer.close()
    yield gateway, keys
    admin.close()
    gateway.stop()


def test_console_asks_for_a_key_and_shows_only_what_its_acls_allow(secured, page):
    gateway, keys = secured
    answer = httpx.get(
        f"{gateway.url}/v3/clusters", headers={"X-Requested-With": "lakelog-console"}
    )
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == 'Bearer realm="lakelog"'  # no browser dialog
    assert "Basic" in httpx.get(f"{gateway.url}/v3/clusters").headers["www-authenticate"]

    open_console(page, gateway.url, "/topics", "document.getElementById('login')")
    page.fill("#login input[name=api_key]", keys["viewer"])
    page.evaluate("document.getElementById('login').requestSubmit()")
    page.wait_for(rows_ready("#topics"), what="the topic list after signing in")
    assert [row[0] for row in page.rows("#topics")] == ["visible"]
    assert page.text("#who").startswith(f"key {keys['viewer'].split('.')[0]}")

    open_console(page, gateway.url, "/topics/hidden", "!document.getElementById('banner').hidden")
    assert "40301" in page.text("#banner")

    page.click("#who button")
    page.wait_for("document.getElementById('login')", what="the sign-in form after signing out")


def test_console_files_are_public_with_a_strict_content_security_policy(secured):
    gateway, _ = secured
    page = httpx.get(f"{gateway.url}/ui", follow_redirects=True)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    script = httpx.get(f"{gateway.url}/ui/app.js")
    assert script.headers["content-type"].startswith("text/javascript")
    # A raw `..` (httpx would normalise it away) stays a console path: public, and not found.
    host, port = gateway.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request("GET", "/ui/../metrics")
    raw = connection.getresponse()
    assert raw.status == 404 and b"lakelog_" not in raw.read()
    connection.close()
    assert httpx.get(f"{gateway.url}/ui/secrets.json").status_code == 404


def test_schemas_pages_and_decoded_values_in_the_message_browser(shop, page, tmp_path):
    gateway, client = shop
    schema = json.dumps(
        {
            "type": "record",
            "name": "Payment",
            "namespace": "acme",
            "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}],
        }
    )
    create_topic(client, "payments", partitions=1)
    body = {"value_schema": schema, "records": [{"value": {"id": 7, "amount": 9.5}}]}
    produced = client.post(
        "/topics/payments",
        json=body,
        headers={"Content-Type": "application/vnd.kafka.avro.v2+json"},
    )
    assert produced.status_code == 200, produced.text
    schema_id = produced.json()["value_schema_id"]

    open_console(page, gateway.url, "/schemas", rows_ready("#subjects"))
    assert ["payments-value", "1", str(schema_id), "AVRO"] in page.rows("#subjects")
    shoot(page, "schemas", tmp_path)
    open_console(
        page, gateway.url, "/schemas/payments-value", "!!document.getElementById('schema')"
    )
    shown = page.evaluate("document.getElementById('schema').textContent")
    assert json.loads(shown)["name"] == "Payment"

    route = "/topics/payments/messages?partition=0&offset=0&count=5"
    open_console(page, gateway.url, route, rows_ready("#messages"))
    (row,) = page.rows("#messages")
    assert row[3].startswith(f"schema {schema_id}")
    assert json.loads(row[3].removeprefix(f"schema {schema_id}")) == {"id": 7, "amount": 9.5}
