"""The one place that reads LAKELOG_* environment variables.

Every other package receives a `Settings` value (or the few fields it needs) as an argument.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

MIB = 1024 * 1024


class Settings(BaseSettings):
    """Gateway, storage and Spark settings. Units are the last word of each name."""

    model_config = SettingsConfigDict(env_prefix="LAKELOG_", frozen=True, extra="ignore")

    # Storage: a local directory or an object-store URI (s3://, abfss://, /Volumes/...).
    data_dir: str = "./data"
    # Threads for storage work (Delta commits, reads, store requests): unset, 8 on a local
    # disk (the work is CPU: more threads only take turns) and 64 on an object store, where
    # each thread mostly waits on a request (8 threads at ~40 ms a commit made at most ~200
    # commits a second a node, however many partitions: bench/commit_requests.py).
    io_threads: int | None = Field(default=None, ge=1, le=1024)
    # Storage options for what has no standard variable (credentials and endpoints come from
    # AWS_*, AZURE_STORAGE_*, GOOGLE_*): object_store keys such as {"aws_conditional_put":
    # "etag"}, and lakelog's own {"lakelog.local_commit": "exclusive-create"} (FUSE mounts).
    # LAKELOG_STORAGE_OPTIONS='{"key": "value"}'.
    storage_options: dict[str, str] = Field(default_factory=dict)

    # Gateway identity and address.
    host: str = "127.0.0.1"
    port: int = 8082
    node_id: int = 0
    advertised_url: str | None = None
    cluster_id: str = "lakelog"

    # The Kafka protocol listener (api/kafka): 0 turns it off (`make run` serves it on 9092).
    # Clients reach the node at the advertised "host:port" (default: host and kafka_port).
    kafka_port: int = Field(default=0, ge=0, le=65535)
    kafka_advertised_address: str | None = None
    # Kafka's socket.request.max.bytes: a larger frame closes the connection unread.
    kafka_request_bytes_max: int = Field(default=100 * MIB, gt=0)
    # A client that starts a frame and does not finish it within this is disconnected; an idle
    # connection is closed after connections.max.idle.ms (Kafka's 10 minutes).
    kafka_frame_timeout_ms: int = Field(default=30_000, gt=0)
    kafka_idle_timeout_ms: int = Field(default=600_000, gt=0)
    # Kafka's auto.create.topics.enable (off here: a typo must not create a topic) and
    # num.partitions, the partition count of a topic created that way.
    kafka_auto_create_topics: bool = False
    # lakelog's own log lines: "text", or "json" (one object per line; api/log_format.py).
    log_format: Literal["text", "json"] = "text"
    kafka_auto_create_partitions: int = Field(default=1, ge=1)
    # The transaction protocol Kafka clients are told to use (the `transaction.version` feature
    # ApiVersions finalizes): 2, KIP-890's (Kafka 4's default), or 1 to pin Kafka 4 clients to
    # the first protocol (AddPartitionsToTxn; one epoch per producer session).
    kafka_transaction_version: int = Field(default=2, ge=1, le=2)
    # KIP-848 consumer groups: Kafka's group.consumer.session.timeout.ms (a member silent this
    # long is removed) and group.consumer.heartbeat.interval.ms (what members are told to keep).
    group_consumer_session_timeout_ms: int = Field(default=45_000, ge=1_000)
    group_consumer_heartbeat_interval_ms: int = Field(default=5_000, ge=100)
    # Share groups: Kafka's group.share.min/max.record.lock.duration.ms, the range a group's
    # share.record.lock.duration.ms may take (Kafka's test setups lower the minimum to 1 s).
    group_share_min_record_lock_duration_ms: int = Field(default=15_000, ge=1_000)
    group_share_max_record_lock_duration_ms: int = Field(default=60_000, ge=1_000)

    # Request limits, checked before a body is buffered (bytes) and while it is parsed.
    request_bytes_max: int = Field(default=16 * MIB, gt=0)
    records_per_request_max: int = Field(default=10_000, gt=0)
    stream_record_bytes_max: int = Field(default=2 * MIB, gt=0)
    headers_per_record_max: int = Field(default=64, ge=0)
    key_bytes_max: int = Field(default=64 * 1024, gt=0)
    # The request line and headers (api/http/http_protocol.py): 414/431 beyond these, 408 if
    # they take longer than the timeout to arrive (slow loris). Tomcat's and nginx's orders of
    # magnitude.
    request_head_bytes_max: int = Field(default=64 * 1024, ge=1024)
    request_headers_max: int = Field(default=100, gt=0)
    request_head_timeout_ms: int = Field(default=30_000, ge=0)

    # Group commit: one Delta commit takes everything queued, within these bounds.
    linger_ms: int = Field(default=2, ge=0)
    commit_records_max: int = Field(default=50_000, gt=0)
    commit_bytes_max: int = Field(default=32 * MIB, gt=0)
    # Kafka's producer.id.expiration.ms: a partition forgets an idempotent producer that has
    # not written to it for this long (its next batch must then start a new epoch or at 0).
    producer_id_expiration_ms: int = Field(default=86_400_000, gt=0)

    # Fetch: defaults and caps for one fetch request; tail kept in memory per partition.
    fetch_bytes_max_default: int = Field(default=1 * MIB, gt=0)
    fetch_bytes_max_cap: int = Field(default=64 * MIB, gt=0)
    fetch_timeout_ms_max: int = Field(default=30_000, ge=0)
    fetch_records_max: int = Field(default=10_000, gt=0)
    tail_records_max: int = Field(default=20_000, ge=0)
    # Follower fetching (Kafka's KIP-392): a node that does not lead a partition serves its
    # committed records from the shared table; only reads at the head go to the leader.
    follower_fetch: bool = True

    # REST consumer instances idle this long are deleted (Confluent's consumer.instance.timeout.ms).
    consumer_instance_timeout_ms: int = Field(default=300_000, gt=0)
    # Consumer lag sampled on each group's coordinator this often, the last
    # `lag_history_samples` kept (the console's lag chart; default: one hour).
    lag_sample_interval_ms: int = Field(default=10_000, ge=100)
    lag_history_samples: int = Field(default=360, ge=1, le=10_000)

    # Several nodes on one root: a node that has not renewed its liveness record for
    # `lease_ms` is dead and its partitions move; it renews every `heartbeat_ms`.
    lease_ms: int = Field(default=6_000, ge=100)
    heartbeat_ms: int = Field(default=1_000, ge=20)
    forward_timeout_ms: int = Field(default=30_000, gt=0)
    # TEST ONLY: appends without the offset/leader compare-and-set and without lease checks.
    # It exists so the fault tests can show that they detect the duplicates it causes.
    unsafe_disable_fencing: bool = False

    # How often a node re-reads the topic catalog written by other nodes or tools.
    catalog_refresh_ms: int = Field(default=5_000, ge=0)

    # TEST ONLY. "after_commit_before_ack": the gateway exits (code 75) right after a durable
    # commit, before answering the requests in it (tests of retries after a crash).
    fault_point: str | None = None

    # Security (README "Security"). `auth`: "none" (default) or "api-keys" (every request but
    # `GET /` needs `Authorization: Bearer <key_id>.<secret>` or Basic `key_id:secret`).
    # `authorizer`: "none" or "acl" (Kafka's ACLs; no matching ACL = deny). Super users skip
    # ACLs (Kafka's `super.users`, ";"- or ","-separated). `cluster_secret` signs node-to-node
    # requests: set it on every node or on none (with auth on, nodes then share one made in
    # `_meta/principals`).
    auth: Literal["none", "api-keys"] = "none"
    authorizer: Literal["none", "acl"] = "none"
    super_users: str = ""
    cluster_secret: SecretStr | None = None
    # TLS: serve HTTPS with this certificate chain and key (PEM). Nodes, and the CLI, verify
    # servers against `tls_ca_file` (else the system's CAs) and present the certificate as a
    # client certificate; `tls_client_auth=required` refuses clients without one signed by
    # `tls_ca_file` (mutual TLS, at the connection; principals still come from API keys).
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_ca_file: str | None = None
    tls_client_auth: Literal["none", "required"] = "none"
    # OAuth: with auth on and `oauth_jwks` set (a JWKS file path, or an http(s) URL of one),
    # JWTs signed by those keys authenticate too: SASL OAUTHBEARER on the Kafka listener and
    # `Authorization: Bearer <jwt>` over HTTP. A token must name `oauth_issuer` (iss) and
    # `oauth_audience` (aud) when they are set, and be unexpired (`oauth_leeway_ms` of clock
    # skew allowed); its `oauth_principal_claim` (sub) names the principal `User:<claim>`.
    oauth_jwks: str | None = None
    oauth_issuer: str | None = None
    oauth_audience: str | None = None
    oauth_principal_claim: str = "sub"
    oauth_leeway_ms: int = Field(default=30_000, ge=0)
    # A token naming an unknown key id fetches a JWKS URL again, at most this often (a token
    # flood cannot make the node hammer the identity provider).
    oauth_jwks_refresh_ms: int = Field(default=30_000, ge=0)
    # A verified key is trusted this long without re-reading the store (revocation delay).
    auth_cache_ms: int = Field(default=10_000, ge=0)
    # How often ACLs, principals and quota overrides are re-read from the store.
    security_refresh_ms: int = Field(default=5_000, ge=0)
    # Per-principal byte-rate quotas per node (Kafka's producer_byte_rate/consumer_byte_rate);
    # None = unlimited. Overrides per principal: `lakelog quotas set`.
    quota_produce_bytes_per_s: int | None = Field(default=None, gt=0)
    quota_fetch_bytes_per_s: int | None = Field(default=None, gt=0)

    # Cluster-wide defaults for topic configs (Kafka's log.retention.ms, log.segment.bytes,
    # ...), used by topics that do not set their own. A gateway stores the ones set here in the
    # root (_meta/topic_defaults.json) at start, so jobs and Spark resolve configs the same way.
    default_retention_ms: int | None = Field(default=None, ge=-1)
    default_retention_bytes: int | None = Field(default=None, ge=-1)
    default_cleanup_policy: str | None = None
    default_segment_bytes: int | None = Field(default=None, ge=14)
    default_segment_ms: int | None = Field(default=None, ge=1)
    default_max_message_bytes: int | None = Field(default=None, ge=0)
    default_message_timestamp_type: str | None = None
    default_delete_retention_ms: int | None = Field(default=None, ge=0)
    default_min_compaction_lag_ms: int | None = Field(default=None, ge=0)
    default_compression_type: str | None = None
    default_delta_log_retention_ms: int | None = Field(default=None, ge=0)

    def topic_defaults(self) -> dict[str, object]:
        """The cluster-wide topic config defaults set here, by Kafka topic config name."""
        prefix = "default_"
        return {
            name.removeprefix(prefix).replace("_", "."): value
            for name, value in self.model_dump().items()
            if name.startswith(prefix) and value is not None
        }

    # Maintenance jobs, run by every gateway for the partitions it is the preferred node of
    # (off: LAKELOG_MAINTENANCE=false, `lakelog serve --no-maintenance`) and by `lakelog jobs
    # schedule`: how often each runs (Kafka's log.retention.check.interval.ms is 5 min), and
    # what vacuum keeps (Delta's 7 days).
    maintenance: bool = True
    retention_interval_ms: int = Field(default=300_000, gt=0)
    compact_keys_interval_ms: int = Field(default=300_000, gt=0)
    optimize_files_interval_ms: int = Field(default=3_600_000, gt=0)
    vacuum_interval_ms: int = Field(default=86_400_000, gt=0)
    vacuum_retention_ms: int = Field(default=7 * 86_400_000, gt=0)

    # Spark (local runs; on Databricks the cluster's session is used).
    spark_master: str = "local[2]"
    spark_shuffle_partitions: int = 4

    @model_validator(mode="after")
    def _check_security(self) -> Settings:
        if self.cluster_secret is not None and len(self.cluster_secret.get_secret_value()) < 16:
            raise ValueError(
                "LAKELOG_CLUSTER_SECRET must have 16+ characters (the same on every node), or "
                "be unset: nodes with auth on then share a secret made in the store."
            )
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("LAKELOG_TLS_CERT_FILE and LAKELOG_TLS_KEY_FILE go together.")
        if self.tls_client_auth == "required" and (
            self.tls_cert_file is None or self.tls_ca_file is None
        ):
            raise ValueError(
                "LAKELOG_TLS_CLIENT_AUTH=required needs LAKELOG_TLS_CERT_FILE, "
                "LAKELOG_TLS_KEY_FILE and LAKELOG_TLS_CA_FILE (the clients' certificates' CA)."
            )
        return self

    def maintenance_intervals_ms(self) -> dict[str, int]:
        """Each maintenance job's interval, by job name (storage_layout/maintenance/jobs.py)."""
        return {
            "retention": self.retention_interval_ms,
            "compact-keys": self.compact_keys_interval_ms,
            "optimize-files": self.optimize_files_interval_ms,
            "vacuum": self.vacuum_interval_ms,
        }

    @property
    def tls_enabled(self) -> bool:
        return self.tls_cert_file is not None

    @property
    def url(self) -> str:
        """Where other nodes and clients reach this node."""
        scheme = "https" if self.tls_enabled else "http"
        return (self.advertised_url or f"{scheme}://{self.host}:{self.port}").rstrip("/")

    @property
    def kafka_address(self) -> str | None:
        """Where Kafka clients reach this node ("host:port"), or None with the listener off."""
        if not self.kafka_port:
            return None
        return self.kafka_advertised_address or f"{self.host}:{self.kafka_port}"

    @property
    def super_user_names(self) -> frozenset[str]:
        names = (n.strip() for n in self.super_users.replace(",", ";").split(";"))
        return frozenset(n if n.startswith("User:") else f"User:{n}" for n in names if n)


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment, with explicit overrides (e.g. CLI flags) winning."""
    values = {key: value for key, value in overrides.items() if value is not None}
    return Settings(**values)
