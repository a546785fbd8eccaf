"""The values every schema format shares: its type name, references, and the parsed form."""

from __future__ import annotations

import abc
import hashlib
import json
import uuid
from dataclasses import dataclass

from storage_layout.errors import InvalidSchema

AVRO, JSON, PROTOBUF = "AVRO", "JSON", "PROTOBUF"
SCHEMA_TYPES = (AVRO, JSON, PROTOBUF)
# Kafka's default max.message.bytes, the bound Confluent's registry has through its topic.
SCHEMA_BYTES_MAX = 1 << 20
# A reference chain deeper than this is refused rather than followed.
REFERENCE_DEPTH_MAX = 32


@dataclass(frozen=True, slots=True)
class Reference:
    """A schema this one imports: `name` as the schema writes it (an Avro full name, a JSON
    Schema `$ref` URL, a Protobuf import path), registered as `subject` version `version`."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True, slots=True, eq=False)
class ParsedSchema(abc.ABC):
    """A schema that parsed, with its references resolved: a frozen value. Subclasses add
    `schema_type`, `text` (the canonical form: stored, served, compared) and `references`,
    and hold the format library's own objects."""

    def fingerprint(self) -> str:
        """Equal for equal schemas: the registry's one id per schema."""
        payload = json.dumps(
            [self.schema_type, self.text, [r.to_json() for r in self.references]],
            separators=(",", ":"),
            ensure_ascii=False,
        )
        return hashlib.sha256(payload.encode()).hexdigest()

    def guid(self) -> str:
        """The schema's GUID (Confluent's header form of a schema id), from its fingerprint
        so that every node names the same schema alike."""
        return str(uuid.UUID(bytes=bytes.fromhex(self.fingerprint())[:16], version=4))

    @abc.abstractmethod
    def read_errors(self, writer: ParsedSchema) -> list[str]:
        """Why data written with `writer` cannot be read with this schema (empty: it can)."""

    def normalized(self) -> ParsedSchema:
        """The schema in the form `normalize=true` compares (default: its canonical form)."""
        return self


def check_size(text: str) -> None:
    if len(text.encode()) > SCHEMA_BYTES_MAX:
        raise InvalidSchema(
            f"The schema is {len(text.encode())} bytes, more than {SCHEMA_BYTES_MAX}: "
            "split it into referenced schemas."
        )


def load_json(text: str, what: str) -> object:
    try:
        return json.loads(text)
    except ValueError as error:
        raise InvalidSchema(f"Invalid {what} schema: not JSON ({error}).") from error


def compact_json(document: object, *, sort_keys: bool = False) -> str:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys)
