"""Wire formats of the hot paths (produce bodies, fetched records), parsed with orjson.

Per-record pydantic models cost about a quarter of produce throughput, so these bodies are parsed
by hand here and validated with messages that name the bad record's position.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from api.core.records import ACKS_ALL, ACKS_NONE, Idempotence, ProduceRecord
from api.http.errors import ApiError
from api.http.limits import JSON_DEPTH_CODE, JSON_DEPTH_MAX, json_depth_exceeds, json_depth_message
from storage_layout.records import NewRecord

BINARY = "binary"
JSON = "json"
# The media type of records in each embedded format (fetch responses, consumer records).
RECORD_MEDIA_TYPES = {
    BINARY: "application/vnd.kafka.binary.v2+json",
    JSON: "application/vnd.kafka.json.v2+json",
    # the schema formats (api/http/schema_formats.py)
    "avro": "application/vnd.kafka.avro.v2+json",
    "jsonschema": "application/vnd.kafka.jsonschema.v2+json",
    "protobuf": "application/vnd.kafka.protobuf.v2+json",
}

_V2_TYPE = re.compile(
    r"application/vnd\.kafka(?:\.(binary|json|avro|jsonschema|protobuf))?\.v[12]\+json"
)
# Karapace-compatible: generic JSON and octet-stream bodies are binary (base64) produce bodies.
_LENIENT_BINARY_TYPES = (
    "application/json",
    "application/octet-stream",
    "application/vnd.kafka+json",
)
SCHEMA_FORMATS = ("avro", "jsonschema", "protobuf")


def produce_format(content_type: str | None) -> str:
    """The embedded format of a v2 produce body from its Content-Type (415 if unsupported)."""
    media = (content_type or "").split(";")[0].strip().lower()
    match = _V2_TYPE.fullmatch(media)
    if match:
        return match.group(1) or BINARY
    if media in _LENIENT_BINARY_TYPES:
        return BINARY
    raise ApiError(
        415,
        415,
        f"Unsupported Content-Type '{content_type}': use application/vnd.kafka."
        f"<binary|json|avro|jsonschema|protobuf>.v2+json.",
    )


def fetch_format(accept: str | None) -> str:
    """The format records are returned in, from the Accept header (406 if unsupported)."""
    for part in (accept or "*/*").split(","):
        media = part.split(";")[0].strip().lower()
        if media in ("*/*", "application/*", "application/json", "application/vnd.kafka.v2+json"):
            return BINARY
        match = _V2_TYPE.fullmatch(media)
        if match:
            return match.group(1) or BINARY
    raise ApiError(
        406,
        40601,
        f"Cannot return records as '{accept}': accept application/vnd.kafka."
        f"<binary|json|avro|jsonschema|protobuf>.v2+json.",
    )


# ---- limits and producer fields (v2 and v3) -------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordLimits:
    """Per-request and per-record limits checked while a produce body is parsed."""

    records_max: int
    headers_max: int
    key_bytes_max: int

    @classmethod
    def from_settings(cls, settings) -> RecordLimits:
        return cls(
            settings.records_per_request_max,
            settings.headers_per_record_max,
            settings.key_bytes_max,
        )


ACKS_DESCRIPTION = (
    "When to answer: `0` as soon as the records are queued (202, offsets null); `1`, `all` or "
    "`-1` (default) after the durable Delta commit. There are no broker replicas: an "
    "acknowledged record is as durable as the storage root."
)
ACKS_PATTERN = "^(0|1|-1|all)$"


def acks_mode(acks: str) -> str:
    """'0' or 'all' from a validated `acks` query value."""
    return ACKS_NONE if acks == "0" else ACKS_ALL


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1  # partitions, sequences, generations: Kafka int32s
# Timestamps are stored in microseconds (int64); ISO-8601 text cannot go past year 9999 either.
TIMESTAMP_MS_MAX = 253_402_300_799_999

_PRODUCER_FIELDS = ("producer_id", "producer_epoch", "base_sequence", "base_sequences")
TRANSACTIONAL_ID_CHARS_MAX = 249


def _transactional_id(document: dict) -> str | None:
    """The `transactional_id` of a produce (its records join that id's open transaction)."""
    value = document.get("transactional_id")
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= TRANSACTIONAL_ID_CHARS_MAX:
        raise _producer_error(
            f"'transactional_id' must be a string of 1 to {TRANSACTIONAL_ID_CHARS_MAX} "
            "characters: the id given to begin."
        )
    if "producer_id" not in document:
        raise _producer_error(
            "A transactional produce needs the producer_id and producer_epoch that begin "
            "returned, and sequences."
        )
    return value


def _producer_error(message: str) -> ApiError:
    return ApiError(422, 42209, message)


def _int_field(document: dict, name: str) -> int:
    value = document.get(name)
    if not _is_int(value):
        raise _producer_error(f"'{name}' must be an integer when 'producer_id' is given.")
    if not INT64_MIN <= value <= INT64_MAX:  # stored in int64 columns: a 500 otherwise
        raise _producer_error(f"'{name}' {value} does not fit in a signed 64-bit integer.")
    return value


def v2_idempotence(document: dict, partition: int | None) -> Idempotence | None:
    """Producer fields of a v2 body (lakelog extension), or None for a plain produce.

    Partition URL: `base_sequence`. Topic URL: `base_sequences` {"<partition>": int}, one per
    partition that receives records.
    """
    if not any(name in document for name in (*_PRODUCER_FIELDS, "transactional_id")):
        return None
    transactional_id = _transactional_id(document)
    producer_id = _int_field(document, "producer_id")
    epoch = _int_field(document, "producer_epoch")
    if partition is not None and "base_sequence" in document:
        sequences = {partition: _int_field(document, "base_sequence")}
        return Idempotence(producer_id, epoch, sequences, transactional_id=transactional_id)
    sequences = document.get("base_sequences")
    if not isinstance(sequences, dict):
        where = "'base_sequence'" if partition is not None else "'base_sequences'"
        raise _producer_error(
            f"An idempotent produce needs {where}: 'base_sequence' on a partition URL, "
            f"'base_sequences' {{\"<partition>\": <first sequence>}} on a topic URL."
        )
    try:
        parsed = {int(key): value for key, value in sequences.items() if _is_int(value)}
    except ValueError:
        parsed = {}
    if len(parsed) != len(sequences):
        raise _producer_error(
            "'base_sequences' must map partition numbers to integer sequences, e.g. {\"0\": 0}."
        )
    return Idempotence(producer_id, epoch, parsed, transactional_id=transactional_id)


def v3_idempotence(document: dict) -> Idempotence | None:
    """`producer_id`, `producer_epoch`, `sequence` (and `transactional_id`) of a v3 record
    (a batch of one)."""
    fields = ("producer_id", "producer_epoch", "sequence", "transactional_id")
    if not any(name in document for name in fields):
        return None
    transactional_id = _transactional_id(document)
    return Idempotence(
        _int_field(document, "producer_id"),
        _int_field(document, "producer_epoch"),
        base_sequence=_int_field(document, "sequence"),
        transactional_id=transactional_id,
    )


def _check_key(key: bytes | None, limits: RecordLimits, where: str) -> bytes | None:
    if key is not None and len(key) > limits.key_bytes_max:
        raise ApiError(
            422,
            42211,
            f"{where}the key is {len(key)} bytes; the limit is {limits.key_bytes_max} "
            f"(LAKELOG_KEY_BYTES_MAX).",
        )
    return key


def _check_header_count(headers: list, limits: RecordLimits, where: str) -> None:
    if len(headers) > limits.headers_max:
        raise ApiError(
            422,
            42210,
            f"{where}{len(headers)} headers; the limit is {limits.headers_max} per record "
            f"(LAKELOG_HEADERS_PER_RECORD_MAX).",
        )


# ---- v2 produce ----------------------------------------------------------------------------


def parse_json(body: bytes, *, depth_max: int = JSON_DEPTH_MAX) -> object:
    """The JSON document of a request body: 422 42206 if empty, 400 if malformed (including
    invalid UTF-8 and lone surrogates), 422 42213 if nested deeper than `depth_max`."""
    document = _loads(body, depth_max)
    # No more brackets than the limit cannot be too deep: most bodies are not walked.
    brackets = body.count(b"[") + body.count(b"{")
    if brackets > depth_max and json_depth_exceeds(document, depth_max):
        raise json_depth_error(depth_max)
    return document


def _loads(body: bytes, depth_max: int) -> object:
    """parse_json without the depth walk. Produce bodies use it: a walk over every record costs
    about a fifth of produce parsing, so there only what is encoded again (JSON-embedded keys
    and values) is checked, by `_dumps_record_json`; anything else deep is refused by type
    checks or ignored."""
    if not body.strip():
        raise ApiError(422, 42206, "The request body is empty: send a JSON object.")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as error:
        if "depth limit" in str(error):  # orjson's own limit (1024), above ours
            raise json_depth_error(depth_max) from None
        raise ApiError(400, 400, f"The request body is not valid JSON: {error}.") from None


def json_depth_error(depth_max: int) -> ApiError:
    return ApiError(422, JSON_DEPTH_CODE, json_depth_message(depth_max))


def _dumps_record_json(data: object, envelope_depth: int) -> bytes:
    """A JSON-embedded key or value as bytes, refused (422 42213) if its nesting plus the
    `envelope_depth` around it in the request exceeds JSON_DEPTH_MAX. The depth limit also keeps
    orjson below its encoding limit (254 levels), which would otherwise be a 500."""
    if json_depth_exceeds(data, JSON_DEPTH_MAX - envelope_depth):
        raise json_depth_error(JSON_DEPTH_MAX)
    try:
        return orjson.dumps(data)
    except orjson.JSONEncodeError:
        raise json_depth_error(JSON_DEPTH_MAX) from None


@dataclass(frozen=True, slots=True)
class V2Produce:
    records: list[ProduceRecord]
    idempotence: Idempotence | None


def parse_v2_produce(
    body: bytes, embedded: str, *, partition: int | None, limits: RecordLimits
) -> V2Produce:
    """Records of a v2 produce body `{"records": [{"key", "value", "partition"?, ...}]}`.

    Extensions (lakelog, Karapace-compatible): `headers` `[{"key": str, "value": base64|null}]`
    and `timestamp` (epoch milliseconds or ISO-8601) per record; top-level `producer_id`,
    `producer_epoch` and `base_sequence` / `base_sequences` (idempotent produce).
    """
    document = _loads(body, JSON_DEPTH_MAX)
    if not isinstance(document, dict):
        raise ApiError(400, 400, "The request body must be a JSON object with 'records'.")
    records = document.get("records")
    if records is None:
        raise ApiError(422, 422, "The request body has no 'records': send a non-empty array.")
    if not isinstance(records, list):
        raise ApiError(400, 400, "'records' must be a JSON array of record objects.")
    if not records:
        raise ApiError(422, 422, "'records' may not be empty.")
    if len(records) > limits.records_max:
        raise ApiError(
            422, 42208, f"{len(records)} records in one request; the limit is {limits.records_max}."
        )
    decode = _decode_binary if embedded == BINARY else _encode_json
    in_url = partition is not None
    parsed = [_v2_record(index, r, decode, in_url, limits) for index, r in enumerate(records)]
    if in_url:
        parsed = [ProduceRecord(partition, r.record) for r in parsed]
    return V2Produce(parsed, v2_idempotence(document, partition))


def _v2_record(
    index: int, record: object, decode, partition_in_url: bool, limits: RecordLimits
) -> ProduceRecord:
    if not isinstance(record, dict):
        raise ApiError(400, 400, f"Record {index} must be a JSON object.")
    if "value" not in record:
        raise ApiError(422, 422, f"Record {index} has no 'value' (use null for a tombstone).")
    partition = record.get("partition")
    if partition is not None and (partition_in_url or not _is_int(partition)):
        raise ApiError(
            422,
            422,
            f"Record {index}: 'partition' must be an integer and is not allowed when the URL "
            f"names the partition.",
        )
    new_record = NewRecord(
        key=_check_key(decode(record.get("key"), index, "key"), limits, f"Record {index}: "),
        value=decode(record.get("value"), index, "value"),
        timestamp_ms=_timestamp_ms(record.get("timestamp"), index),
        headers=_v2_headers(record.get("headers"), index, limits),
    )
    return ProduceRecord(partition, new_record)


def _decode_binary(data: object, index: int | None, field: str) -> bytes | None:
    if data is None:
        return None
    where = "" if index is None else f"Record {index}: "
    if not isinstance(data, str):
        raise ApiError(400, 400, f"{where}'{field}' must be a base64 string or null.")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, 400, f"{where}'{field}' is not valid base64.") from None


# Containers around a record's key/value in a request: {"records": [{"value": ...}]} and
# {"value": {"data": ...}}.
_V2_RECORD_DEPTH = 3
_V3_DATA_DEPTH = 2


def _encode_json(data: object, index: int, field: str) -> bytes | None:
    return None if data is None else _dumps_record_json(data, _V2_RECORD_DEPTH)


def _v2_headers(headers: object, index: int, limits: RecordLimits) -> tuple:
    if headers is None:
        return ()
    if not isinstance(headers, list):
        raise ApiError(400, 400, f"Record {index}: 'headers' must be an array.")
    _check_header_count(headers, limits, f"Record {index}: ")
    parsed = []
    for header in headers:
        if not isinstance(header, dict) or not isinstance(header.get("key"), str):
            raise ApiError(
                400, 400, f'Record {index}: each header must be {{"key": str, "value": b64}}.'
            )
        parsed.append((header["key"], _decode_binary(header.get("value"), index, "header value")))
    return tuple(parsed)


def iso_to_ms(text: str) -> int | None:
    """Epoch ms of an ISO-8601 time (`Z` or an offset; none means UTC), None if malformed."""
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def _timestamp_ms(value: object, index: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and (parsed_ms := iso_to_ms(value)) is not None:
        value = parsed_ms
    elif not _is_int(value):
        raise ApiError(
            422, 422, f"Record {index}: 'timestamp' must be epoch milliseconds or ISO-8601 text."
        )
    if not 0 <= value <= TIMESTAMP_MS_MAX:
        raise ApiError(
            422,
            422,
            f"Record {index}: 'timestamp' {value} is out of range: use 0 (1970) to "
            f"{TIMESTAMP_MS_MAX} (9999-12-31T23:59:59.999Z) epoch milliseconds.",
        )
    return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ---- v3 produce ----------------------------------------------------------------------------

V3_TYPES = ("BINARY", "JSON", "STRING")  # AVRO, JSONSCHEMA, PROTOBUF: schema_formats.py


@dataclass(frozen=True, slots=True)
class V3Record:
    """One v3 record with the sizes/types echoed in its delivery report."""

    produce: ProduceRecord
    key_type: str | None
    key_size: int
    value_type: str | None
    value_size: int
    idempotence: Idempotence | None = None


def parse_v3_record(document: object, limits: RecordLimits) -> V3Record:
    """`{"partition_id"?, "headers"?, "key"?: {"type", "data"}, "value"?: {...}, "timestamp"?}`.

    A missing `type` means JSON; schema types are serialized before (schema_formats.py). Extension:
    `producer_id`, `producer_epoch`, `sequence` make the record an idempotent batch of one;
    with `transactional_id`, one of that id's open transaction (routes/v3_transactions.py).
    """
    if not isinstance(document, dict):
        raise ApiError(400, 400, "A record must be a JSON object.")
    partition = document.get("partition_id")
    if partition is not None and not _is_int(partition):
        raise ApiError(400, 400, "'partition_id' must be an integer.")
    key_type, key = _v3_data(document.get("key"), "key")
    value_type, value = _v3_data(document.get("value"), "value")
    record = NewRecord(
        key=_check_key(key, limits, ""),
        value=value,
        timestamp_ms=_timestamp_ms(document.get("timestamp"), 0),
        headers=_v3_headers(document.get("headers"), limits),
    )
    return V3Record(
        ProduceRecord(partition, record),
        key_type,
        len(key or b""),
        value_type,
        len(value or b""),
        v3_idempotence(document),
    )


def _v3_data(section: object, field: str) -> tuple[str | None, bytes | None]:
    if section is None:
        return None, None
    if not isinstance(section, dict):
        raise ApiError(400, 400, f'\'{field}\' must be an object {{"type", "data"}}.')
    kind = str(section.get("type", "JSON")).upper()
    data = section.get("data")
    if kind not in V3_TYPES:
        raise ApiError(
            400,
            400,
            f"'{field}.type' {kind!r} is not supported: use BINARY, JSON, STRING, AVRO, "
            "JSONSCHEMA or PROTOBUF.",
        )
    if data is None:
        return kind, None
    if kind == "BINARY":
        return kind, _decode_binary(data, None, f"{field}.data")
    if kind == "STRING":
        if not isinstance(data, str):
            raise ApiError(400, 400, f"'{field}.data' must be a string for type STRING.")
        return kind, data.encode()
    return kind, _dumps_record_json(data, _V3_DATA_DEPTH)


def _v3_headers(headers: object, limits: RecordLimits) -> tuple:
    if headers is None:
        return ()
    if not isinstance(headers, list):
        raise ApiError(400, 400, '\'headers\' must be an array of {"name", "value"}.')
    _check_header_count(headers, limits, "")
    parsed = []
    for header in headers:
        if not isinstance(header, dict) or not isinstance(header.get("name"), str):
            raise ApiError(400, 400, 'Each header must be {"name": str, "value": b64|null}.')
        parsed.append((header["name"], _decode_binary(header.get("value"), None, "header value")))
    return tuple(parsed)


def iso_ms(epoch_ms: int) -> str:
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# ---- fetched records -----------------------------------------------------------------------


def records_to_json(records: pa.Table, *, topic: str, partition: int, embedded: str) -> bytes:
    """Fetched records as the v2 consumer API shows them, plus timestamp and headers."""
    return orjson.dumps(
        records_to_items(records, topic=topic, partition=partition, embedded=embedded)
    )


def records_to_items(records: pa.Table, *, topic: str, partition: int, embedded: str) -> list[dict]:
    """The records of `records_to_json`, before encoding."""
    columns = records.select(["offset", "timestamp_type", "key", "value", "headers"]).to_pydict()
    timestamps_ms = pc.divide(records.column("timestamp").cast(pa.int64()), 1000).to_pylist()
    encode = _b64 if embedded == BINARY else _json_value
    items = []
    for i in range(records.num_rows):
        item = {
            "topic": topic,
            "key": encode(columns["key"][i]),
            "value": encode(columns["value"][i]),
            "partition": partition,
            "offset": columns["offset"][i],
            "timestamp": timestamps_ms[i],
            "timestamp_type": "LogAppendTime" if columns["timestamp_type"][i] else "CreateTime",
        }
        headers = columns["headers"][i]
        if headers:
            item["headers"] = [{"key": h["key"], "value": _b64(h["value"])} for h in headers]
        items.append(item)
    return items


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _json_value(data: bytes | None) -> object:
    if data is None:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        raise ApiError(
            422,
            42207,
            "A record is not valid JSON and cannot be returned in the json format: fetch it with "
            "Accept: application/vnd.kafka.binary.v2+json.",
        ) from None
