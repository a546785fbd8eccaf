"""Route -> authorization rule: what every gateway route requires (Kafka's mapping of requests
to operations on resources). `tests/security/test_units.py` fails if a route has none.

Kinds: "acl" (the checks, on path parameters, made before the route runs), "route" (the route
checks itself, because the resource is in the body: see `also`), "filter" (a list filtered to
what the principal may DESCRIBE, as Kafka's Metadata/ListGroups do), "authenticated" (any
principal), "public" (no credentials: `GET /` is the health check), "node" (node-to-node only).
"""

from __future__ import annotations

from dataclasses import dataclass

from api.security.quotas import FETCH, PRODUCE
from storage_layout.cluster import routes

CLUSTER = "<cluster>"  # the cluster resource, named "kafka-cluster" as in Kafka


@dataclass(frozen=True, slots=True)
class Check:
    operation: str
    resource_type: str
    source: str  # the path parameter naming the resource, or CLUSTER


@dataclass(frozen=True, slots=True)
class Rule:
    kind: str = "acl"
    checks: tuple[Check, ...] = ()
    quota: str | None = None  # "produce" / "fetch": bytes charged to the principal's bucket
    instance: bool = False  # the v2 consumer instance must belong to the principal
    also: str = ""  # what the route itself checks, for the docs and reviewers


PUBLIC = Rule("public")
AUTHENTICATED = Rule("authenticated")
NODE = Rule("node")


def topic(operation: str, **kwargs) -> Rule:
    return Rule(checks=(Check(operation, "topic", "topic"),), **kwargs)


def group(operation: str, **kwargs) -> Rule:
    return Rule(checks=(Check(operation, "group", "group"),), **kwargs)


def transactional(operation: str, **kwargs) -> Rule:
    return Rule(checks=(Check(operation, "transactional_id", "transactional_id"),), **kwargs)


def cluster(operation: str) -> Rule:
    return Rule(checks=(Check(operation, "cluster", CLUSTER),))


INSTANCE = "/consumers/{group}/instances/{instance}"
V3 = "/v3/clusters/{cluster_id}"
V3_GROUP = V3 + "/consumer-groups/{group}"
V3_SHARE = V3 + "/share-groups/{group}"
V3_TRANSACTION = V3 + "/transactions/{transactional_id}"
_READ_TOPICS = "READ on every topic named in the body"
_SUBJECT = "%s on the subject, or on the topic of a <topic>-key/-value subject"
_DEAD_LETTER = "READ on the topic, WRITE (and CREATE, if new) on the dead letter topic"

RULES: dict[tuple[str, str], Rule] = {
    ("GET", "/"): PUBLIC,
    # the web console's static files (its API requests are authorized as any client's);
    # rules are keyed without a trailing slash, so this one covers `/ui/` too
    ("GET", "/ui"): PUBLIC,
    ("GET", "/ui/{name}"): PUBLIC,
    **{
        (m, p): AUTHENTICATED
        for m in ("GET", "HEAD")
        for p in ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")
    },
    # v2 topics and produce
    ("GET", "/topics"): Rule("filter", also="topics the principal may DESCRIBE"),
    ("GET", "/topics/{topic}"): topic("DESCRIBE"),
    ("GET", "/topics/{topic}/partitions"): topic("DESCRIBE"),
    ("GET", "/topics/{topic}/partitions/{partition}"): topic("DESCRIBE"),
    ("GET", "/topics/{topic}/partitions/{partition}/offsets"): topic("DESCRIBE"),
    ("GET", "/brokers"): AUTHENTICATED,
    ("POST", "/topics/{topic}"): topic("WRITE", quota=PRODUCE, also="producer id owned"),
    ("POST", "/topics/{topic}/partitions/{partition}"): topic(
        "WRITE", quota=PRODUCE, also="producer id owned"
    ),
    # stateless fetch
    ("GET", "/topics/{topic}/partitions/{partition}/records"): topic("READ", quota=FETCH),
    # v2 consumer instances (Kafka: JoinGroup/OffsetCommit = READ group, Fetch = READ topic)
    ("POST", "/consumers/{group}"): group("READ"),
    ("DELETE", INSTANCE): group("READ", instance=True),
    ("POST", INSTANCE + "/subscription"): group("READ", instance=True, also=_READ_TOPICS),
    ("GET", INSTANCE + "/subscription"): group("READ", instance=True),
    ("DELETE", INSTANCE + "/subscription"): group("READ", instance=True),
    ("POST", INSTANCE + "/assignments"): group("READ", instance=True, also=_READ_TOPICS),
    ("GET", INSTANCE + "/assignments"): group("READ", instance=True),
    ("POST", INSTANCE + "/positions"): group("READ", instance=True),
    ("POST", INSTANCE + "/positions/beginning"): group("READ", instance=True),
    ("POST", INSTANCE + "/positions/end"): group("READ", instance=True),
    ("GET", INSTANCE + "/records"): group(
        "READ", instance=True, quota=FETCH, also="READ on every assigned topic"
    ),
    ("POST", INSTANCE + "/offsets"): group("READ", instance=True, also=_READ_TOPICS),
    ("GET", INSTANCE + "/offsets"): group("READ", instance=True),
    ("POST", INSTANCE + "/dead-letters"): group("READ", instance=True, also=_DEAD_LETTER),
    # native groups
    ("POST", "/groups/{group}/members"): group("READ"),
    ("POST", "/groups/{group}/members/{member}/sync"): group("READ"),
    ("POST", "/groups/{group}/members/{member}/heartbeat"): group("READ"),
    ("DELETE", "/groups/{group}/members/{member}"): group("READ"),
    ("POST", "/groups/{group}/offsets"): group("READ", also=_READ_TOPICS),
    ("GET", "/groups/{group}/offsets"): group("DESCRIBE"),
    ("POST", "/groups/{group}/dead-letters"): group("READ", also=_DEAD_LETTER),
    ("GET", "/groups/{group}"): group("DESCRIBE"),
    ("DELETE", "/groups/{group}"): group("DELETE"),
    # v3 clusters and topics
    ("GET", "/v3/clusters"): AUTHENTICATED,
    ("GET", V3): AUTHENTICATED,
    ("GET", V3 + "/topics"): Rule("filter", also="topics the principal may DESCRIBE"),
    ("POST", V3 + "/topics"): Rule("route", also="CREATE on the cluster or on the topic"),
    ("GET", V3 + "/topics/{topic}"): topic("DESCRIBE"),
    ("PATCH", V3 + "/topics/{topic}"): topic("ALTER"),
    ("DELETE", V3 + "/topics/{topic}"): topic("DELETE"),
    ("GET", V3 + "/topics/{topic}/partitions"): topic("DESCRIBE"),
    ("GET", V3 + "/topics/{topic}/partitions/{partition}"): topic("DESCRIBE"),
    ("GET", V3 + "/topics/{topic}/partitions/{partition}/replicas"): topic("DESCRIBE"),
    ("GET", V3 + "/topics/{topic}/partitions/{partition}/replicas/{broker_id}"): topic("DESCRIBE"),
    ("GET", V3 + "/topics/{topic}/configs/{name}"): topic("DESCRIBE_CONFIGS"),
    ("PUT", V3 + "/topics/{topic}/configs/{name}"): topic("ALTER_CONFIGS"),
    ("DELETE", V3 + "/topics/{topic}/configs/{name}"): topic("ALTER_CONFIGS"),
    ("GET", V3 + "/topics/{topic}/partitions/{partition}/reassignment"): topic("DESCRIBE"),
    ("GET", V3 + "/topics/{topic}/partitions/-/reassignment"): topic("DESCRIBE"),
    ("GET", V3 + "/topics/-/partitions/-/reassignment"): AUTHENTICATED,
    ("GET", V3 + "/brokers"): AUTHENTICATED,
    ("GET", V3 + "/brokers/{broker_id}"): AUTHENTICATED,
    ("GET", V3 + "/topics/{topic}/configs"): topic("DESCRIBE_CONFIGS"),
    ("POST", V3 + "/topics/{topic}/configs:alter"): topic("ALTER_CONFIGS"),
    ("POST", V3 + "/topics/{topic}/records"): topic(
        "WRITE", quota=PRODUCE, also="producer id owned"
    ),
    ("POST", V3 + "/producers"): Rule(
        "route",
        also="WRITE on the transactional id; else IDEMPOTENT_WRITE on the cluster or WRITE on "
        "some topic",
    ),
    # share groups (a lakelog extension: api/http/routes/share_groups.py)
    ("GET", V3 + "/share-groups"): Rule("filter", also="groups the principal may DESCRIBE"),
    ("GET", V3_SHARE): group("DESCRIBE"),
    ("POST", V3_SHARE + "/records:acquire"): group("READ", also=_READ_TOPICS),
    ("POST", V3_SHARE + "/records:acknowledge"): group("READ"),
    ("GET", V3_SHARE + "/configs"): group("DESCRIBE_CONFIGS"),
    ("POST", V3_SHARE + "/configs:alter"): group("ALTER_CONFIGS"),
    ("POST", V3_SHARE + "/offsets:reset"): group("READ", also=_READ_TOPICS),
    ("DELETE", V3_SHARE): group("DELETE"),
    # v3 consumer groups (read-only views)
    ("GET", V3 + "/consumer-groups"): Rule("filter", also="groups the principal may DESCRIBE"),
    ("GET", V3_GROUP): group("DESCRIBE"),
    ("GET", V3_GROUP + "/consumers"): group("DESCRIBE"),
    ("GET", V3_GROUP + "/consumers/{consumer_id:path}"): group("DESCRIBE"),
    ("GET", V3_GROUP + "/consumers/{consumer_id:path}/assignments"): group("DESCRIBE"),
    (
        "GET",
        V3_GROUP + "/consumers/{consumer_id:path}/assignments/{topic}/partitions/{partition}",
    ): group("DESCRIBE"),
    ("GET", V3_GROUP + "/lags"): group("DESCRIBE"),
    ("GET", V3_GROUP + "/lags/{topic}/partitions/{partition}"): group("DESCRIBE"),
    ("GET", V3_GROUP + "/lag-summary"): group("DESCRIBE"),
    ("GET", V3_GROUP + "/lag-history"): group("DESCRIBE"),
    # ACLs (Kafka: DescribeAcls = DESCRIBE cluster, Create/DeleteAcls = ALTER cluster)
    ("GET", V3 + "/acls"): cluster("DESCRIBE"),
    ("GET", V3 + "/maintenance"): cluster("DESCRIBE"),
    ("GET", "/metrics"): cluster("DESCRIBE"),
    ("POST", V3 + "/acls"): cluster("ALTER"),
    ("DELETE", V3 + "/acls"): cluster("ALTER"),
    # transactions (lakelog extension; Kafka: InitProducerId/EndTxn = WRITE transactional id,
    # TxnOffsetCommit = READ group, DescribeTransactions = DESCRIBE transactional id)
    ("POST", V3_TRANSACTION + "/begin"): transactional("WRITE"),
    ("POST", V3_TRANSACTION + "/commit"): transactional("WRITE", also="producer id owned"),
    ("POST", V3_TRANSACTION + "/abort"): transactional("WRITE", also="producer id owned"),
    ("GET", V3_TRANSACTION): transactional("DESCRIBE"),
    ("POST", V3_TRANSACTION + "/consumer-groups/{group}/offsets"): Rule(
        checks=(
            Check("WRITE", "transactional_id", "transactional_id"),
            Check("READ", "group", "group"),
        ),
        also="producer id owned; READ on every topic named in the body",
    ),
    # the schema registry (api/http/routes/schema_registry.py): reads by any principal
    **{
        ("GET", path): AUTHENTICATED
        for path in (
            "/schemas",
            "/schemas/types",
            "/schemas/ids/{schema_id}",
            "/schemas/ids/{schema_id}/schema",
            "/schemas/ids/{schema_id}/subjects",
            "/schemas/ids/{schema_id}/versions",
            "/schemas/guids/{guid}",
            "/contexts",
            "/subjects",
            "/subjects/{subject}/versions",
            "/subjects/{subject}/versions/{version}",
            "/subjects/{subject}/versions/{version}/schema",
            "/subjects/{subject}/versions/{version}/referencedby",
            "/config",
            "/config/{subject}",
            "/mode",
            "/mode/{subject}",
        )
    },
    ("POST", "/subjects/{subject}"): AUTHENTICATED,  # a lookup
    ("POST", "/compatibility/subjects/{subject}/versions"): AUTHENTICATED,
    ("POST", "/compatibility/subjects/{subject}/versions/{version}"): AUTHENTICATED,
    ("POST", "/subjects/{subject}/versions"): Rule("route", also=_SUBJECT % "WRITE"),
    ("DELETE", "/subjects/{subject}"): Rule("route", also=_SUBJECT % "ALTER"),
    ("DELETE", "/subjects/{subject}/versions/{version}"): Rule("route", also=_SUBJECT % "ALTER"),
    **{
        (method, f"/{kind}/{{subject}}"): Rule("route", also=_SUBJECT % "ALTER")
        for method in ("PUT", "DELETE")
        for kind in ("config", "mode")
    },
    ("PUT", "/config"): cluster("ALTER"),
    ("DELETE", "/config"): cluster("ALTER"),
    ("PUT", "/mode"): cluster("ALTER"),
    # node to node (storage_layout/cluster/routes.py)
    **dict.fromkeys(routes.ALL_PATHS, NODE),
}


def rule_for(method: str, path: str | None) -> Rule | None:
    """The rule of a route template (a trailing slash, as Karapace accepts, is ignored)."""
    if path is None:
        return None
    if path != "/":
        path = path.rstrip("/")
    return RULES.get((method.upper(), path))
