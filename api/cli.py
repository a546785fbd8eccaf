"""`lakelog`: serve the gateway; manage topics and consumer groups, produce and consume like
Kafka's console tools.

Client commands talk to a gateway over HTTP (`--bootstrap-server`, default
$LAKELOG_BOOTSTRAP_SERVER or http://127.0.0.1:8082), as Kafka's tools talk to a broker, so every
write goes through the partition's single writer.
"""

from __future__ import annotations

import argparse
import base64
import os
import select
import sys
from collections.abc import Iterator
from datetime import datetime

import httpx

from api import cli_dlq, cli_shares
from api.cli_http import (
    CliError,
    bootstrap_option,
    call,
    cluster_path,
    error_text,
    gateway_client,
    print_table,
    request_any,
)
from api.version import VERSION

PRODUCE_BATCH_RECORDS_MAX = 1000
READ_CHUNK_BYTES = 1 << 16
CONSUME_FETCH_BYTES = 4 * 1024 * 1024
FOLLOW_POLL_TIMEOUT_MS = 1000
EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return args.handler(args) or EXIT_OK
    except CliError as error:
        print(f"lakelog: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `lakelog consume ... | head`: the reader has gone
        sys.stderr.close()
        return EXIT_OK


# ---- parser --------------------------------------------------------------------------------


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakelog", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"lakelog {VERSION}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_serve(commands)
    _add_topics(commands)
    _add_produce(commands)
    _add_consume(commands)
    _add_groups(commands)
    _add_jobs(commands)
    cli_dlq.add_parser(commands)
    cli_shares.add_parser(commands)
    _add_security(commands)
    _add_schemas(commands)
    return parser


def _add_serve(commands) -> None:
    serve = commands.add_parser("serve", help="run the HTTP gateway")
    serve.add_argument("--data-dir", help="storage root: a directory or s3://, abfss://, ...")
    serve.add_argument("--host", help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (default 8082)")
    serve.add_argument("--node-id", type=int, help="this node's id (default 0)")
    serve.add_argument("--advertised-url", help="URL clients use to reach this node")
    serve.add_argument(
        "--kafka-port",
        type=int,
        help="serve the Kafka protocol on this port ($LAKELOG_KAFKA_PORT; 0 or unset: off)",
    )
    serve.add_argument(
        "--kafka-advertised-address",
        metavar="HOST:PORT",
        help="where Kafka clients reach this node (Metadata answers; default HOST:KAFKA_PORT)",
    )
    serve.add_argument("--log-level", default="info", help="uvicorn log level")
    serve.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=None,
        help="lakelog's log lines as text or one JSON object each (LAKELOG_LOG_FORMAT)",
    )
    serve.add_argument(
        "--access-log", action="store_true", help="log every request (off: it costs throughput)"
    )
    serve.add_argument(
        "--no-maintenance",
        action="store_true",
        help="do not run retention, compaction, file optimization and vacuum in this node",
    )
    serve.set_defaults(handler=_serve)


def _add_topics(commands) -> None:
    topics = commands.add_parser("topics", help="create, list, describe, alter, delete topics")
    actions = topics.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a topic")
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, help="accepted and ignored")
    create.add_argument("--config", action="append", default=[], metavar="NAME=VALUE")
    create.set_defaults(handler=_topics_create)
    listing = actions.add_parser("list", help="list topic names")
    listing.set_defaults(handler=_topics_list)
    describe = actions.add_parser("describe", help="partitions, offsets and configs")
    describe.add_argument("--topic", help="one topic (default: all)")
    describe.set_defaults(handler=_topics_describe)
    alter = actions.add_parser("alter", help="add partitions or change configs")
    alter.add_argument("--topic", required=True)
    alter.add_argument("--partitions", type=int)
    alter.add_argument("--config", action="append", default=[], metavar="NAME=VALUE")
    alter.set_defaults(handler=_topics_alter)
    delete = actions.add_parser("delete", help="delete a topic and its data")
    delete.add_argument("--topic", required=True)
    delete.set_defaults(handler=_topics_delete)
    for action in (create, listing, describe, alter, delete):
        bootstrap_option(action)


def _add_produce(commands) -> None:
    produce = commands.add_parser("produce", help="produce lines from stdin, one record each")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--partition", type=int, help="write every record to this partition")
    produce.add_argument(
        "--key-separator", help="split each line at the first separator into key and value"
    )
    bootstrap_option(produce)
    produce.set_defaults(handler=_produce)


def _add_consume(commands) -> None:
    consume = commands.add_parser("consume", help="print records, one line each")
    consume.add_argument("--topic", required=True)
    consume.add_argument("--from-beginning", action="store_true", help="start at the earliest")
    consume.add_argument("--partition", type=int, help="read only this partition")
    consume.add_argument("--offset", help="start offset: a number, 'earliest' or 'latest'")
    consume.add_argument("--max-records", type=int, help="exit after this many records")
    consume.add_argument("--follow", action="store_true", help="keep waiting for new records")
    consume.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="print.key, print.offset, print.partition, print.timestamp (true|false), "
        "key.separator (default TAB)",
    )
    bootstrap_option(consume)
    consume.set_defaults(handler=_consume)


def _add_groups(commands) -> None:
    groups = commands.add_parser(
        "groups", help="list and describe consumer groups, reset their offsets"
    )
    actions = groups.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="consumer group ids")
    listing.set_defaults(handler=_groups_list)
    describe = actions.add_parser("describe", help="state, and offsets and lag per partition")
    describe.add_argument("--group", required=True)
    describe.set_defaults(handler=_groups_describe)
    reset = actions.add_parser(
        "reset-offsets", help="set a group's committed offsets (the group must have no members)"
    )
    reset.add_argument("--group", required=True)
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC[:P,...]",
        help="a topic (all its partitions) or some of its partitions; repeatable",
    )
    scope.add_argument(
        "--all-topics", action="store_true", help="every partition the group has an offset for"
    )
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start offset")
    target.add_argument("--to-latest", action="store_true", help="the high watermark")
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    target.add_argument(
        "--to-datetime",
        metavar="ISO8601",
        help="the first offset at or after this time, e.g. 2024-05-01T12:00:00.000Z "
        "(no zone: local time)",
    )
    target.add_argument("--shift-by", type=int, metavar="N", help="the committed offset + N")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only print the new offsets")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.set_defaults(handler=_groups_reset)
    delete = actions.add_parser(
        "delete", help="delete a group without members and its committed offsets"
    )
    delete.add_argument("--group", required=True)
    delete.set_defaults(handler=_groups_delete)
    for action in (listing, describe, reset, delete):
        bootstrap_option(action)


# ---- serve ---------------------------------------------------------------------------------


def _serve(args) -> int:
    import uvicorn
    from pydantic import ValidationError

    from api.http import tls
    from api.http.http_protocol import HeadLimits, head_limited_protocol
    from api.node import node_app
    from conf.settings import load_settings
    from storage_layout import store

    try:
        settings = load_settings(
            data_dir=args.data_dir,
            host=args.host,
            port=args.port,
            node_id=args.node_id,
            advertised_url=args.advertised_url,
            kafka_port=args.kafka_port,
            kafka_advertised_address=args.kafka_advertised_address,
            maintenance=False if args.no_maintenance else None,
        )
    except ValidationError as error:
        for problem in error.errors():
            print(f"lakelog serve: {problem['msg'].removeprefix('Value error, ')}", file=sys.stderr)
        return EXIT_USAGE
    try:
        store.configure(settings.storage_options)
        store.check_root(settings.data_dir)
    except (ValueError, store.StoreUnusable) as error:
        print(f"lakelog serve: {error}", file=sys.stderr)
        return EXIT_USAGE
    kafka = f" and Kafka on {settings.kafka_address}" if settings.kafka_address else ""
    print(
        f"lakelog {VERSION}: serving {settings.data_dir} on {settings.url}{kafka}", file=sys.stderr
    )
    from api import log_format

    log_format.configure(args.log_level, args.log_format or settings.log_format, settings.node_id)
    uvicorn.run(
        node_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=args.log_level,
        access_log=args.access_log,
        # Longer than clients' idle-connection expiry (httpx: 5 s, as uvicorn's default): with
        # equal timeouts a client could reuse a connection the server was just closing, and a
        # request would fail with "server disconnected".
        timeout_keep_alive=KEEP_ALIVE_S,
        http=head_limited_protocol(
            HeadLimits(
                bytes_max=settings.request_head_bytes_max,
                headers_max=settings.request_headers_max,
                timeout_ms=settings.request_head_timeout_ms,
            )
        ),
        **tls.server_options(settings),
    )
    return EXIT_OK


# ---- HTTP helpers --------------------------------------------------------------------------


KEEP_ALIVE_S = 75


def _configs(pairs: list[str]) -> list[dict]:
    configs = []
    for pair in pairs:
        name, separator, value = pair.partition("=")
        if not separator:
            raise CliError(f"--config '{pair}' must look like NAME=VALUE (e.g. retention.ms=60000)")
        configs.append({"name": name.strip(), "value": value.strip()})
    return configs


# ---- topics --------------------------------------------------------------------------------


def _topics_create(args) -> int:
    body = {
        "topic_name": args.topic,
        "partitions_count": args.partitions,
        "configs": _configs(args.config),
    }
    with gateway_client(args) as client:
        call(client, "POST", cluster_path(client, "topics"), json=body)
    print(f"Created topic {args.topic}.")
    return EXIT_OK


def _topics_list(args) -> int:
    with gateway_client(args) as client:
        for name in call(client, "GET", "/topics").json():
            print(name)
    return EXIT_OK


def _topics_describe(args) -> int:
    with gateway_client(args) as client:
        names = [args.topic] if args.topic else call(client, "GET", "/topics").json()
        for name in names:
            _describe_one(client, name)
    return EXIT_OK


def _describe_one(client: httpx.Client, name: str) -> None:
    topic = call(client, "GET", f"/topics/{name}").json()
    configs = ",".join(f"{k}={v}" for k, v in sorted(topic["configs"].items()))
    print(f"Topic: {name}\tPartitionCount: {len(topic['partitions'])}\tConfigs: {configs}")
    for partition in topic["partitions"]:
        number = partition["partition"]
        offsets = call(client, "GET", f"/topics/{name}/partitions/{number}/offsets").json()
        print(
            f"\tTopic: {name}\tPartition: {number}\tLeader: {partition['leader']}"
            f"\tLogStartOffset: {offsets['beginning_offset']}"
            f"\tHighWatermark: {offsets['end_offset']}"
        )


def _topics_alter(args) -> int:
    if args.partitions is None and not args.config:
        raise CliError("nothing to alter: give --partitions N and/or --config NAME=VALUE")
    with gateway_client(args) as client:
        if args.partitions is not None:
            body = {"partitions_count": args.partitions}
            call(client, "PATCH", cluster_path(client, "topics", args.topic), json=body)
        if args.config:
            path = cluster_path(client, "topics", args.topic, "configs:alter")
            call(client, "POST", path, json={"data": _configs(args.config)})
    print(f"Altered topic {args.topic}.")
    return EXIT_OK


def _topics_delete(args) -> int:
    with gateway_client(args) as client:
        call(client, "DELETE", cluster_path(client, "topics", args.topic))
    print(f"Deleted topic {args.topic}.")
    return EXIT_OK


# ---- produce -------------------------------------------------------------------------------


def _produce(args) -> int:
    path = f"/topics/{args.topic}"
    if args.partition is not None:
        path += f"/partitions/{args.partition}"
    failures = 0
    with gateway_client(args) as client:
        call(client, "GET", f"/topics/{args.topic}")  # fail fast on an unknown topic
        for lines in _line_batches(sys.stdin.fileno()):
            records = [_line_record(line, args.key_separator) for line in lines]
            failures += _send(client, path, records)
    return EXIT_ERROR if failures else EXIT_OK


def _line_batches(fd: int) -> Iterator[list[bytes]]:
    """Lines read from `fd`, grouped: a batch is whatever input is ready when it is sent (so
    typed lines go out at once and piped input in big batches), at most
    PRODUCE_BATCH_RECORDS_MAX lines. Reads the descriptor directly: no reader thread is left
    blocked on stdin when an error ends the command."""
    pending, batch = b"", []
    while data := os.read(fd, READ_CHUNK_BYTES):
        *lines, pending = (pending + data).split(b"\n")
        batch.extend(line.rstrip(b"\r") for line in lines)
        while len(batch) >= PRODUCE_BATCH_RECORDS_MAX:
            yield batch[:PRODUCE_BATCH_RECORDS_MAX]
            batch = batch[PRODUCE_BATCH_RECORDS_MAX:]
        if batch and not select.select([fd], [], [], 0)[0]:
            yield batch
            batch = []
    if pending:
        batch.append(pending.rstrip(b"\r"))
    if batch:
        yield batch


def _line_record(line: bytes, separator: str | None) -> dict:
    key = None
    if separator is not None:
        key_part, found, value_part = line.partition(separator.encode())
        if not found:
            raise CliError(
                f"line {line[:60]!r} has no key separator {separator!r} (--key-separator)"
            )
        key, line = key_part, value_part
    return {"key": _b64(key), "value": _b64(line)}


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _send(client: httpx.Client, path: str, records: list[dict]) -> int:
    headers = {"Content-Type": "application/vnd.kafka.binary.v2+json"}
    response = client.post(path, json={"records": records}, headers=headers)
    if response.status_code >= 400 and "offsets" not in response.text:
        raise CliError(error_text(response))
    failures = [o for o in response.json()["offsets"] if o["error_code"] is not None]
    for failure in failures:
        print(f"lakelog: error: {failure['error']}", file=sys.stderr)
    return len(failures)


# ---- consume -------------------------------------------------------------------------------


def _consume(args) -> int:
    options = _print_options(args.property)
    with gateway_client(args) as client:
        positions = _start_positions(client, args)
        remaining = args.max_records
        for record in _poll(client, args.topic, positions, follow=args.follow):
            print(_format_record(record, options), flush=True)
            if remaining is not None:
                remaining -= 1
                if remaining <= 0:
                    break
    return EXIT_OK


def _print_options(properties: list[str]) -> dict[str, str]:
    options = {"key.separator": "\t"}
    for prop in properties:
        name, separator, value = prop.partition("=")
        if not separator:
            raise CliError(f"--property '{prop}' must look like NAME=VALUE (e.g. print.key=true)")
        options[name.strip()] = value
    return options


def _start_positions(client: httpx.Client, args) -> dict[int, int]:
    topic = call(client, "GET", f"/topics/{args.topic}").json()
    partitions = [p["partition"] for p in topic["partitions"]]
    if args.partition is not None:
        if args.partition not in partitions:
            raise CliError(f"topic {args.topic} has no partition {args.partition}")
        partitions = [args.partition]
    elif args.offset is not None:
        raise CliError("--offset needs --partition (as in Kafka's console consumer)")
    start = args.offset or ("earliest" if args.from_beginning else "latest")
    return {p: _resolve_offset(client, args.topic, p, start) for p in partitions}


def _resolve_offset(client: httpx.Client, topic: str, partition: int, start: str) -> int:
    if start not in ("earliest", "latest"):
        try:
            return int(start)
        except ValueError:
            raise CliError(f"--offset '{start}' must be a number, earliest or latest") from None
    offsets = call(client, "GET", f"/topics/{topic}/partitions/{partition}/offsets").json()
    return offsets["beginning_offset" if start == "earliest" else "end_offset"]


def _poll(client: httpx.Client, topic: str, positions: dict[int, int], *, follow: bool):
    """Records from every partition, round-robin; stops when caught up unless `follow`."""
    idle_rounds = 0
    while True:
        got_any = False
        for partition, offset in positions.items():
            timeout_ms = FOLLOW_POLL_TIMEOUT_MS if follow and idle_rounds else 0
            records = _fetch(client, topic, partition, offset, timeout_ms)
            if records:
                got_any = True
                positions[partition] = records[-1]["offset"] + 1
                yield from records
        if not got_any and not follow:
            return
        idle_rounds = 0 if got_any else idle_rounds + 1


def _fetch(client: httpx.Client, topic: str, partition: int, offset: int, timeout_ms: int):
    params = {"offset": offset, "max_bytes": CONSUME_FETCH_BYTES, "timeout": timeout_ms}
    path = f"/topics/{topic}/partitions/{partition}/records"
    headers = {"Accept": "application/vnd.kafka.binary.v2+json"}
    return call(client, "GET", path, params=params, headers=headers).json()


def _format_record(record: dict, options: dict[str, str]) -> str:
    separator = options["key.separator"]
    fields = []
    if options.get("print.timestamp") == "true":
        fields.append(f"{record['timestamp_type']}:{record['timestamp']}")
    if options.get("print.partition") == "true":
        fields.append(f"Partition:{record['partition']}")
    if options.get("print.offset") == "true":
        fields.append(f"Offset:{record['offset']}")
    if options.get("print.key") == "true":
        fields.append(_text(record["key"]))
    fields.append(_text(record["value"]))
    return separator.join(fields)


def _text(data: str | None) -> str:
    if data is None:
        return "null"
    return base64.b64decode(data).decode("utf-8", errors="replace")


# ---- groups --------------------------------------------------------------------------------

GROUP_NOT_FOUND = 40405
INACTIVE_STATES = ("Empty", "Dead")  # the states in which Kafka's tool resets offsets
GROUP_STATE_HEADERS = ("GROUP", "COORDINATOR-ID", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
GROUP_OFFSETS_HEADERS = (
    "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
    "CLIENT-ID",
)  # fmt: skip


def _groups_list(args) -> int:
    with gateway_client(args) as client:
        groups = call(client, "GET", cluster_path(client, "consumer-groups")).json()["data"]
    for group in groups:
        print(group["consumer_group_id"])
    return EXIT_OK


def _groups_describe(args) -> int:
    """Kafka's `--describe --state` table, then its `--describe --offsets` table: one row per
    partition with a committed offset or an owner (`-` where there is none)."""
    with gateway_client(args) as client:
        group = call(client, "GET", f"/groups/{args.group}").json()
        lags_path = cluster_path(client, "consumer-groups", args.group, "lags")
        lags = call(client, "GET", lags_path).json()["data"]
        rows = _describe_rows(client, group, lags)
    state = (group["coordinator"], group["protocol"] or "", group["state"], len(group["members"]))
    print_table(GROUP_STATE_HEADERS, [(args.group, *state)])
    print()
    if not group["members"]:
        print(f"Consumer group '{args.group}' has no active members.")
        print()
    if rows:
        print_table(GROUP_OFFSETS_HEADERS, [(args.group, *row) for row in rows])
    return EXIT_OK


def _describe_rows(client: httpx.Client, group: dict, lags: list[dict]) -> list[tuple]:
    """(topic, partition, current, log end, lag, consumer id, client id), sorted."""
    rows = {}
    for lag in lags:
        owner = (lag["consumer_id"] or "-", lag["client_id"] or "-")
        offsets = (lag["current_offset"], lag["log_end_offset"], lag["lag"])
        rows[(lag["topic_name"], lag["partition_id"])] = (*offsets, *owner)
    for member in group["members"]:
        for assigned in member["assignment"]:
            key = (assigned["topic"], assigned["partition"])
            if key not in rows:  # owned, nothing committed yet: Kafka prints "-"
                end = _bounds(client, *key)[1]
                rows[key] = ("-", end, "-", member["member_id"], member["client_id"] or "-")
    return [(*key, *rows[key]) for key in sorted(rows)]


def _groups_reset(args) -> int:
    """Kafka's `--reset-offsets`: compute the new offsets, commit them only with --execute,
    print them either way."""
    timestamp_ms = _timestamp_ms(args.to_datetime) if args.to_datetime else None
    with gateway_client(args) as client:
        _check_inactive(client, args.group)
        committed = _committed(client, args.group)
        partitions = _reset_scope(client, args, committed)
        plan = {
            tp: _new_offset(client, args, tp, committed=committed, timestamp_ms=timestamp_ms)
            for tp in partitions
        }
        if args.execute:
            offsets = [{"topic": t, "partition": p, "offset": o} for (t, p), o in plan.items()]
            body = {"generation_id": -1, "offsets": offsets}
            call(client, "POST", f"/groups/{args.group}/offsets", json=body)
    if not args.execute and not args.dry_run:
        print(
            "WARN: No action will be performed as the --execute option is missing. Add "
            "--execute to commit the new offsets, or --dry-run to only print them.",
            file=sys.stderr,
        )
    print_table(
        ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
        [(args.group, t, p, offset) for (t, p), offset in sorted(plan.items())],
    )
    return EXIT_OK


def _groups_delete(args) -> int:
    with gateway_client(args) as client:
        call(client, "DELETE", f"/groups/{args.group}")
    print(f"Deletion of requested consumer groups ('{args.group}') was successful.")
    return EXIT_OK


def _check_inactive(client: httpx.Client, group_id: str) -> None:
    """As Kafka's tool: offsets are reset (or planned) only for a group without members; an
    unknown group is fine (the reset creates it)."""
    response = request_any(client, "GET", f"/groups/{group_id}")
    if response.status_code == 404 and _error_code(response) == GROUP_NOT_FOUND:
        return
    if response.status_code >= 400:
        raise CliError(error_text(response))
    group = response.json()
    if group["state"] not in INACTIVE_STATES:
        raise CliError(
            f"Assignments can only be reset if the group '{group_id}' is inactive, but the "
            f"current state is {group['state']} ({len(group['members'])} active member(s)): "
            f"stop its consumers first."
        )


def _error_code(response: httpx.Response) -> int | None:
    try:
        return response.json().get("error_code")
    except (ValueError, AttributeError):
        return None


def _committed(client: httpx.Client, group_id: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets (the next offset to read) by (topic, partition)."""
    offsets = call(client, "GET", f"/groups/{group_id}/offsets").json()["offsets"]
    return {(o["topic"], o["partition"]): o["offset"] for o in offsets}


def _reset_scope(
    client: httpx.Client, args, committed: dict[tuple[str, int], int]
) -> list[tuple[str, int]]:
    if args.all_topics:
        if not committed:
            raise CliError(
                f"group '{args.group}' has no committed offsets: name partitions with --topic"
            )
        return sorted(committed)
    partitions: set[tuple[str, int]] = set()
    for spec in args.topic:
        topic, _, numbers = spec.partition(":")
        topic_info = call(client, "GET", f"/topics/{topic}").json()
        existing = [p["partition"] for p in topic_info["partitions"]]
        chosen = _partition_numbers(spec, numbers) if numbers else existing
        for number in chosen:
            if number not in existing:
                raise CliError(f"topic {topic} has no partition {number} (--topic {spec})")
            partitions.add((topic, number))
    return sorted(partitions)


def _partition_numbers(spec: str, numbers: str) -> list[int]:
    try:
        return [int(n) for n in numbers.split(",")]
    except ValueError:
        raise CliError(f"--topic '{spec}' must look like TOPIC or TOPIC:0,1,2") from None


def _new_offset(
    client: httpx.Client,
    args,
    tp: tuple[str, int],
    *,
    committed: dict[tuple[str, int], int],
    timestamp_ms: int | None,
) -> int:
    """The reset target of one partition, clamped to [log_start_offset, high watermark]."""
    start, end, at_time = _bounds(client, *tp, timestamp_ms=timestamp_ms)
    if args.to_earliest:
        target = start
    elif args.to_latest:
        target = end
    elif args.to_offset is not None:
        target = args.to_offset
    elif args.shift_by is not None:
        if tp not in committed:
            raise CliError(
                f"cannot shift the offset of {tp[0]}-{tp[1]}: group '{args.group}' has no "
                f"committed offset for it"
            )
        target = committed[tp] + args.shift_by
    else:
        target = end if at_time is None else at_time  # no record that late: the end (Kafka)
    return _clamp(target, start, end, tp)


def _clamp(target: int, start: int, end: int, tp: tuple[str, int]) -> int:
    if start <= target <= end:
        return target
    bound, side = (
        (start, "lower than the earliest") if target < start else (end, "higher than the latest")
    )
    print(
        f"WARN: New offset ({target}) is {side} offset for topic partition {tp[0]}-{tp[1]}. "
        f"Value will be set to {bound}",
        file=sys.stderr,
    )
    return bound


def _bounds(
    client: httpx.Client, topic: str, partition: int, *, timestamp_ms: int | None = None
) -> tuple[int, int, int | None]:
    """(log_start_offset, high watermark, first offset at or after `timestamp_ms` or None)."""
    params = {} if timestamp_ms is None else {"timestamp": timestamp_ms}
    path = f"/topics/{topic}/partitions/{partition}/offsets"
    body = call(client, "GET", path, params=params).json()
    return body["beginning_offset"], body["end_offset"], body.get("timestamp_offset")


def _timestamp_ms(text: str) -> int:
    """Epoch milliseconds of an ISO-8601 time; without a zone it is local time, as in Kafka's
    tool."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(
            f"--to-datetime '{text}' is not an ISO-8601 time (e.g. 2024-05-01T12:00:00.000Z "
            f"or 2024-05-01T14:00:00+02:00)"
        ) from None
    return round(moment.timestamp() * 1000)


# ---- jobs ----------------------------------------------------------------------------------


def _add_jobs(commands) -> None:
    # Imported here: the jobs package is only needed by this command.
    from jobs.runner import ENGINE_LOCAL, add_arguments
    from storage_layout.maintenance.jobs import JOBS

    jobs = commands.add_parser("jobs", help="retention, key compaction, file optimization, vacuum")
    actions = jobs.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = actions.add_parser("run", help="run one job now, print its plan and a summary")
    run.add_argument("job", choices=JOBS)
    add_arguments(run, default_engine=ENGINE_LOCAL)
    run.set_defaults(handler=_jobs_run)
    schedule = actions.add_parser("schedule", help="run every job on its interval until Ctrl-C")
    add_arguments(schedule, default_engine=ENGINE_LOCAL)
    schedule.set_defaults(handler=_jobs_schedule)


def _jobs_run(args: argparse.Namespace) -> int:
    from jobs.runner import run_from_args

    return run_from_args(args.job, args)


def _jobs_schedule(args: argparse.Namespace) -> int:
    import threading

    from conf.settings import load_settings
    from jobs.runner import request_from
    from jobs.schedule import run_schedule

    run_schedule(load_settings(), request_from("retention", args), stop=threading.Event())
    return EXIT_OK


# ---- security: principals, api-keys, acls, quotas (on the store under --data-dir) -----------


def _add_security(commands) -> None:
    from api.security.cli import add_commands

    add_commands(commands)


def _add_schemas(commands) -> None:
    from api.cli_schemas import add_commands

    add_commands(commands)


def run() -> None:
    """The `lakelog` console script: `main`, then an immediate exit. deltalake's writer can
    leave native threads behind that abort the interpreter's shutdown ("terminate called
    without an active exception", delta-rs#2184) after its commit has returned; every command
    has finished its work and its output here, so nothing is cut short."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
