"""`lakelog dlq list|replay --topic T`: the dead letters of a topic, and sending them back.

Dead letters are what consumers gave up on (`POST /groups/{g}/dead-letters`, or a REST
instance's `.../dead-letters`): copies of the records in `<topic>.dlq` whose `lakelog.dlq.*`
headers name the source partition and offset, the error and the attempts.

`replay` produces each dead letter of the topic back to its source partition (same key, value
and own headers, plus `lakelog.dlq.replayed.from` and the attempts so far) and commits its
progress through the dead letter topic in the replay group, so a second run replays only what
arrived since. At least once: a run stopped between a produce and its commit replays those
records again.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import httpx

from api.cli_http import CliError, bootstrap_option, call, gateway_client, print_table

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
HEADER_PREFIX = "lakelog.dlq."
REPLAYED_FROM_HEADER = HEADER_PREFIX + "replayed.from"
ATTEMPTS_HEADER = HEADER_PREFIX + "attempts"
DEFAULT_REPLAY_GROUP = "lakelog-dlq-replay"
FETCH_BYTES = 1 << 20
ERROR_SHOWN_CHARS = 120


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One record of a dead letter topic, with its `lakelog.dlq.*` headers decoded."""

    partition: int
    offset: int
    key: str | None  # base64, as the gateway sends it
    value: str | None
    own_headers: tuple[dict, ...]
    facts: dict[str, str]

    @property
    def source_topic(self) -> str | None:
        return self.facts.get("source.topic")

    @property
    def source_partition(self) -> int:
        return int(self.facts["source.partition"])


def add_parser(commands) -> None:
    dlq = commands.add_parser("dlq", help="list the dead letters of a topic, replay them")
    actions = dlq.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="one line per dead letter")
    replay = actions.add_parser("replay", help="produce dead letters back to their partitions")
    replay.add_argument(
        "--group",
        default=DEFAULT_REPLAY_GROUP,
        help="the group whose committed offsets record replay progress (default %(default)s)",
    )
    replay.add_argument("--dry-run", action="store_true", help="only list what would be replayed")
    for action in (listing, replay):
        action.add_argument("--topic", required=True, help="the topic the records came from")
        action.add_argument("--dead-letter-topic", help="default: TOPIC.dlq")
        action.add_argument("--max-records", type=int, help="stop after this many dead letters")
        bootstrap_option(action)
    listing.set_defaults(handler=_list)
    replay.set_defaults(handler=_replay)


def _dead_letter_topic(args) -> str:
    return args.dead_letter_topic or f"{args.topic}.dlq"


def _list(args) -> int:
    dlq = _dead_letter_topic(args)
    with gateway_client(args) as client:
        letters = list(_limited(_dead_letters(client, dlq, args.topic, {}), args.max_records))
    print_table(
        ("PARTITION", "OFFSET", "SOURCE", "ATTEMPTS", "GROUP", "ERROR"),
        [
            (
                letter.partition,
                letter.offset,
                f"{letter.source_topic}-{letter.source_partition}@{letter.facts['source.offset']}",
                letter.facts.get("attempts", ""),
                letter.facts.get("group", ""),
                _one_line(letter.facts.get("error", "")),
            )
            for letter in letters
        ],
    )
    return 0


def _replay(args) -> int:
    dlq = _dead_letter_topic(args)
    replayed = 0
    with gateway_client(args) as client:
        call(client, "GET", f"/topics/{args.topic}")  # fail fast on an unknown topic
        start = _committed(client, args.group, dlq)
        for letter in _limited(_dead_letters(client, dlq, args.topic, start), args.max_records):
            if not args.dry_run:
                _produce_back(client, args.topic, dlq, letter)
                _commit(client, args.group, dlq, letter)
            replayed += 1
            if replayed % 1000 == 0:
                print(f"replayed {replayed} dead letters ...", file=sys.stderr)
    verb = "would replay" if args.dry_run else "replayed"
    print(f"{verb} {replayed} dead letter(s) from {dlq} to {args.topic}.")
    return 0


def _dead_letters(
    client: httpx.Client, dlq: str, source_topic: str, start: dict[int, int]
) -> Iterator[DeadLetter]:
    """The dead letters of `source_topic` in `dlq`, partition by partition, from `start` (the
    replay group's committed offsets) or the log start, up to each high watermark now."""
    for partition in _partitions(client, dlq):
        bounds = call(client, "GET", f"/topics/{dlq}/partitions/{partition}/offsets").json()
        offset = max(start.get(partition, 0), bounds["beginning_offset"])
        while offset < bounds["end_offset"]:
            items = _fetch(client, dlq, partition, offset)
            if not items:
                break
            for item in items:
                letter = _dead_letter(partition, item)
                if letter.source_topic == source_topic:
                    yield letter
            offset = items[-1]["offset"] + 1


def _partitions(client: httpx.Client, topic: str) -> list[int]:
    response = call(client, "GET", f"/topics/{topic}")
    return [p["partition"] for p in response.json()["partitions"]]


def _fetch(client: httpx.Client, topic: str, partition: int, offset: int) -> list[dict]:
    return call(
        client,
        "GET",
        f"/topics/{topic}/partitions/{partition}/records",
        params={"offset": offset, "max_bytes": FETCH_BYTES},
        headers={"Accept": BINARY_V2},
    ).json()


def _dead_letter(partition: int, item: dict) -> DeadLetter:
    headers = item.get("headers") or []
    facts = {
        h["key"][len(HEADER_PREFIX) :]: _text(h["value"])
        for h in headers
        if h["key"].startswith(HEADER_PREFIX)
    }
    own = tuple(h for h in headers if not h["key"].startswith(HEADER_PREFIX))
    return DeadLetter(partition, item["offset"], item["key"], item["value"], own, facts)


def _produce_back(client: httpx.Client, topic: str, dlq: str, letter: DeadLetter) -> None:
    ours = [
        {"key": REPLAYED_FROM_HEADER, "value": _b64(f"{dlq}/{letter.partition}/{letter.offset}")},
        {"key": ATTEMPTS_HEADER, "value": _b64(letter.facts.get("attempts", "1"))},
    ]
    record = {"key": letter.key, "value": letter.value, "headers": [*letter.own_headers, *ours]}
    response = call(
        client,
        "POST",
        f"/topics/{topic}/partitions/{letter.source_partition}",
        json={"records": [record]},
        headers={"Content-Type": BINARY_V2},
    )
    [result] = response.json()["offsets"]
    if result.get("error_code"):
        raise CliError(
            f"replaying {dlq}/{letter.partition}@{letter.offset} failed: {result.get('error')} "
            f"(error {result['error_code']}); rerun to continue from there"
        )


def _committed(client: httpx.Client, group: str, dlq: str) -> dict[int, int]:
    offsets = call(client, "GET", f"/groups/{group}/offsets").json()["offsets"]
    return {o["partition"]: o["offset"] for o in offsets if o["topic"] == dlq}


def _commit(client: httpx.Client, group: str, dlq: str, letter: DeadLetter) -> None:
    offsets = [{"topic": dlq, "partition": letter.partition, "offset": letter.offset + 1}]
    call(client, "POST", f"/groups/{group}/offsets", json={"generation_id": -1, "offsets": offsets})


def _limited(letters: Iterator[DeadLetter], limit: int | None) -> Iterator[DeadLetter]:
    for count, letter in enumerate(letters):
        if limit is not None and count >= limit:
            return
        yield letter


def _text(value: str | None) -> str:
    return "" if value is None else base64.b64decode(value).decode(errors="replace")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ERROR_SHOWN_CHARS else text[: ERROR_SHOWN_CHARS - 3] + "..."
