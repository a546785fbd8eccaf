"""`lakelog share-groups list|describe|reset|delete`: share groups (queues), as Kafka's
`kafka-share-groups` shows them, over the gateway's HTTP routes (README "Share groups").

`describe` prints the group's state and members, then one row per share partition: its start
offset (every record before it is settled), its lag (records from there not yet settled) and
its in-flight records by state. `reset` starts share partitions over at the earliest or latest
offset, or at an offset; like Kafka's tool it refuses while the group has members.
"""

from __future__ import annotations

from api.cli_http import bootstrap_option, call, cluster_path, gateway_client, print_table

STATE_HEADERS = ("GROUP", "COORDINATOR (ID)", "STATE", "#MEMBERS")
PARTITION_HEADERS = (
    "GROUP",
    "TOPIC",
    "PARTITION",
    "START-OFFSET",
    "LAG",
    "AVAILABLE",
    "ACQUIRED",
    "ACKNOWLEDGED",
    "ARCHIVED",
)
MEMBER_HEADERS = ("GROUP", "MEMBER-ID", "CLIENT-ID", "HOST", "EPOCH", "TOPICS")


def add_parser(commands) -> None:
    shares = commands.add_parser(
        "share-groups", help="list, describe, reset and delete share groups (queues)"
    )
    actions = shares.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="share group ids")
    describe = actions.add_parser("describe", help="state, members, share partitions")
    reset = actions.add_parser("reset", help="start share partitions over (no members)")
    delete = actions.add_parser("delete", help="delete a share group without members")
    for action in (describe, reset, delete):
        action.add_argument("--group", required=True)
    reset.add_argument("--topic", required=True, action="append", help="repeat for several")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=int)
    for action in (listing, describe, reset, delete):
        bootstrap_option(action)
    listing.set_defaults(handler=_list)
    describe.set_defaults(handler=_describe)
    reset.set_defaults(handler=_reset)
    delete.set_defaults(handler=_delete)


def _list(args) -> int:
    with gateway_client(args) as client:
        groups = call(client, "GET", cluster_path(client, "share-groups")).json()["data"]
    for group in groups:
        print(group["group_id"])
    return 0


def _describe(args) -> int:
    with gateway_client(args) as client:
        group = call(client, "GET", cluster_path(client, "share-groups", args.group)).json()
    members = group["members"]
    print_table(STATE_HEADERS, [(args.group, group["coordinator"], group["state"], len(members))])
    print()
    if members:
        rows = [
            (args.group, m["member_id"], m["client_id"], m["client_host"], m["member_epoch"],
             ",".join(m["topics"]))
            for m in members
        ]  # fmt: skip
        print_table(MEMBER_HEADERS, rows)
    else:
        print(f"Share group '{args.group}' has no active members.")
    print()
    rows = [
        (args.group, p["topic_name"], p["partition_id"], p["start_offset"], p["lag"],
         *(p["records"][s] for s in ("available", "acquired", "acknowledged", "archived")))
        for p in group["partitions"]
    ]  # fmt: skip
    if rows:
        print_table(PARTITION_HEADERS, rows)
    return 0


def _reset(args) -> int:
    to = "earliest" if args.to_earliest else "latest" if args.to_latest else args.to_offset
    with gateway_client(args) as client:
        path = cluster_path(client, "share-groups", args.group, "offsets:reset")
        results = call(client, "POST", path, json={"topics": args.topic, "to": to}).json()
    rows = [
        (args.group, r["topic_name"], r["partition_id"], r["start_offset"])
        for r in results["results"]
    ]
    print_table(("GROUP", "TOPIC", "PARTITION", "NEW-START-OFFSET"), rows)
    return 0


def _delete(args) -> int:
    with gateway_client(args) as client:
        call(client, "DELETE", cluster_path(client, "share-groups", args.group))
    print(f"Deleted share group '{args.group}'.")
    return 0
