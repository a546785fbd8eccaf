"""The options of `format("lakelog")`, batch and stream alike: Spark's Kafka source names
(offsets, timestamps, topics, isolation, flags), the storage root and storage options.

Spark's option names are case-insensitive: readers keep them lower-cased (`lowercase`) and
look them up so (`option_value`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from storage_layout import paths, store
from storage_layout.log import DeltaPartitionLog
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.records import Isolation

TOPIC_OPTIONS = ("subscribe", "subscribePattern", "assign")
STORAGE_OPTIONS = "storageOptions"
ISOLATION_OPTION = "kafka.isolation.level"
# lakelog's own: the typed columns of keys and values with a registered schema (FORMAT.md §17)
TYPED_COLUMNS_OPTION = "typedColumns"

# Kafka's sentinels in per-partition offset JSON.
EARLIEST = -2
LATEST = -1


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets [start, end) of one partition, read from Delta version `table_version`."""

    partition: int
    start: int
    end: int
    table_version: int


def parse_offsets(
    spec: str | Mapping, *, topic: str, partitions: int, ending: bool
) -> dict[int, int]:
    """Offsets by partition (-2 earliest, -1 latest) from a starting or ending offsets option.

    Only the partitions `spec` mentions are returned. Raises ValueError for what Spark's Kafka
    source rejects in a batch query, for other topics, unknown partitions and non-integers.
    """
    option = "endingOffsets" if ending else "startingOffsets"
    if isinstance(spec, str) and spec.strip() in ("earliest", "latest"):
        _check_keyword(spec.strip(), ending=ending)
        return {}
    by_topic = load_offsets_json(spec, option=option)
    other_topics = sorted(name for name in by_topic if name != topic)
    if other_topics:
        raise ValueError(f"{option} names topics other than '{topic}': {other_topics}.")
    by_partition = by_topic.get(topic, {})
    if not isinstance(by_partition, Mapping):
        raise ValueError(f"{option} for topic '{topic}' must map partitions to offsets.")
    return {
        _partition_number(key, option=option, topic=topic, partitions=partitions): _offset_value(
            value, option=option, topic=topic, partition=key, ending=ending
        )
        for key, value in by_partition.items()
    }


def resolve_range(
    log: DeltaPartitionLog, *, partition: int, start: int, end: int, topic: str
) -> OffsetRange:
    """Turn -2/-1 into the partition's bounds and check explicit offsets against them."""
    bounds = log.bounds()
    low, high = bounds.log_start_offset, bounds.high_watermark
    resolved = {EARLIEST: low, LATEST: high}
    first, last = resolved.get(start, start), resolved.get(end, end)
    where = f"{topic}-{partition}"
    for option, offset in (("startingOffsets", first), ("endingOffsets", last)):
        if not low <= offset <= high:
            raise ValueError(
                f"{option} for {where} is {offset}, outside the partition's offsets: "
                f"log_start_offset {low}, high_watermark {high} (valid: {low} to {high})."
            )
    if first > last:
        raise ValueError(
            f"For {where} the starting offset {first} is after the ending offset {last}."
        )
    return OffsetRange(partition, first, last, log.snapshot.table_version)


def _check_keyword(keyword: str, *, ending: bool) -> None:
    # Spark's wording (KafkaSourceProvider.validateBatchOptions).
    if ending and keyword == "earliest":
        raise ValueError("ending offset can't be earliest for batch queries on Kafka")
    if not ending and keyword == "latest":
        raise ValueError("starting offset can't be latest for batch queries on Kafka")


def load_offsets_json(spec: str | Mapping, *, option: str) -> Mapping:
    if isinstance(spec, Mapping):
        by_topic = spec
    else:
        try:
            by_topic = json.loads(spec)
        except (TypeError, json.JSONDecodeError) as error:
            raise ValueError(
                f'{option} must be "earliest", "latest" or JSON like '
                f'{{"topic": {{"0": 23, "1": -2}}}}; got {spec!r} ({error}).'
            ) from None
    if not isinstance(by_topic, Mapping):
        raise ValueError(f"{option} JSON must be an object keyed by topic; got {spec!r}.")
    return by_topic


def _partition_number(key: object, *, option: str, topic: str, partitions: int) -> int:
    try:
        partition = int(key)  # JSON object keys are strings; dicts may use ints
    except (TypeError, ValueError):
        raise ValueError(f"{option} for topic '{topic}' has a bad partition {key!r}.") from None
    if not 0 <= partition < partitions:
        raise ValueError(
            f"{option} names partition {partition} of topic '{topic}', which has partitions "
            f"0..{partitions - 1}."
        )
    return partition


def _offset_value(value: object, *, option: str, topic: str, partition: object, ending: bool):
    if isinstance(value, bool) or not isinstance(value, int) or value < EARLIEST:
        raise ValueError(
            f"{option} for {topic}-{partition} must be an offset >= 0, -2 (earliest) or -1 "
            f"(latest); got {value!r}."
        )
    if ending and value == EARLIEST:
        raise ValueError(
            f"ending offset for {topic}-{partition} can't be earliest for batch queries on Kafka"
        )
    return value


# ---- source options ----------------------------------------------------------------------


def adopt_storage_options(options: Mapping[str, str]) -> None:
    """Take the `storageOptions` option (a JSON object of storage options, as
    LAKELOG_STORAGE_OPTIONS) in this process. Spark plans a Python data source in a worker
    process, not the driver's, so explicit options travel as a data source option; the splits
    and write tasks carry them on to the executors."""
    text = option_value(options, STORAGE_OPTIONS)
    if not text:
        return
    try:
        parsed = json.loads(text)
    except ValueError as error:
        raise ValueError(f"Option {STORAGE_OPTIONS} must be a JSON object: {error}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"Option {STORAGE_OPTIONS} must be a JSON object of strings.")
    store.adopt({str(k): str(v) for k, v in parsed.items()})


def storage_options_option() -> dict[str, str]:
    """This process's explicit storage options as data source options (empty when none), for
    the helpers that build `format("lakelog")` reads and writes on the driver."""
    options = store.storage_options()
    return {STORAGE_OPTIONS: json.dumps(options, sort_keys=True)} if options else {}


def isolation_of(options: Mapping[str, str]) -> Isolation:
    """Spark's Kafka source option: read_uncommitted (its default: every data record) or
    read_committed (PLAIN or COMMITTED_DATA); markers are left out either way."""
    level = option_value(options, ISOLATION_OPTION) or "read_uncommitted"
    try:
        return Isolation.for_data_readers(level)
    except ValueError:
        raise ValueError(
            f"{ISOLATION_OPTION} must be read_uncommitted or read_committed, not {level!r}."
        ) from None


def root_of(options: Mapping[str, str]) -> str:
    root = option_value(options, "path") or option_value(options, "root")
    if not root:
        raise ValueError("Give the lakelog storage root: .load(root) or .option('path', root).")
    return paths.normalize_root(root)


def topic_partitions(options: Mapping[str, str], catalog: TopicCatalog) -> dict[str, set[int]]:
    given = [name for name in TOPIC_OPTIONS if option_value(options, name)]
    if len(given) != 1:
        raise ValueError(
            "Exactly one of 'subscribe', 'subscribePattern' and 'assign' must be given, as for "
            f"Spark's Kafka source (got {given or 'none'})."
        )
    if "assign" in given:
        return _assigned(option_value(options, "assign"), catalog)
    topics = catalog.topics()
    if "subscribe" in given:
        names = [t.strip() for t in option_value(options, "subscribe").split(",") if t.strip()]
        for name in names:
            catalog.topic(name)  # TopicNotFound names it
    else:
        pattern = re.compile(option_value(options, "subscribePattern"))
        names = sorted(t for t in topics if pattern.fullmatch(t))
    return {name: set(range(topics[name].partitions)) for name in names}


def _assigned(spec: str, catalog: TopicCatalog) -> dict[str, set[int]]:
    try:
        assigned = json.loads(spec)
    except json.JSONDecodeError as error:
        raise ValueError(f'assign must be JSON like {{"orders": [0, 1]}}: {error}') from None
    if not isinstance(assigned, dict):
        raise ValueError('assign must be JSON like {"orders": [0, 1]}.')
    result = {}
    for topic, partitions in assigned.items():
        info = catalog.topic(topic)
        for partition in partitions:
            info.check_partition(partition)
        result[topic] = set(partitions)
    return result


def offsets_option(options, name: str, topic: str, partitions: set[int], *, ending: bool):
    spec = option_value(options, name) or ("latest" if ending else "earliest")
    if spec.strip() not in ("earliest", "latest"):
        by_topic = json.loads(spec)
        spec = {topic: by_topic[topic]} if topic in by_topic else "latest" if ending else "earliest"
    offsets = parse_offsets(spec, topic=topic, partitions=max(partitions) + 1, ending=ending)
    return {p: o for p, o in offsets.items() if p in partitions}


def timestamp_option(options, global_name: str, json_name: str, topic: str, partition: int):
    if option_value(options, global_name):
        return int(option_value(options, global_name))
    spec = option_value(options, json_name)
    if not spec:
        return None
    value = json.loads(spec).get(topic, {}).get(str(partition))
    return None if value is None else int(value)


def lowercase(options: Mapping[str, str]) -> dict[str, str]:
    """Spark's option names are case-insensitive: keep them lower-cased, look them up so."""
    return {str(key).lower(): value for key, value in options.items()}


def option_value(options: Mapping[str, str], name: str) -> str | None:
    return lowercase(options).get(name.lower())


def flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = option_value(options, name)
    if value is None:
        return default
    if str(value).lower() not in ("true", "false"):
        raise ValueError(f"Option {name} must be true or false, not {value!r}.")
    return str(value).lower() == "true"
