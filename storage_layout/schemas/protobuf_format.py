"""Protobuf schemas: `.proto` text compiled by protoc (grpcio-tools' packaging of it, run as a
child process so that its messages can be reported), or a base64 `FileDescriptorProto` as
Confluent's Python serializer registers it. A reference names an import path. Compatibility
follows Confluent's rules for Protobuf, which judge the wire format: fields by number,
wire-compatible scalar groups, required fields, oneofs, removed messages, the package."""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message

from storage_layout.errors import InvalidSchema
from storage_layout.schemas import protobuf_text
from storage_layout.schemas.model import PROTOBUF, ParsedSchema, Reference, check_size

MAIN_FILE = "schema.proto"  # the name protoc compiles a registered schema under
PROTOC_TIMEOUT_S = 30
_FDP = descriptor_pb2.FieldDescriptorProto
# Scalar types a reader may read for one another (one wire encoding each).
_WIRE_GROUPS = (
    {
        _FDP.TYPE_INT32,
        _FDP.TYPE_UINT32,
        _FDP.TYPE_INT64,
        _FDP.TYPE_UINT64,
        _FDP.TYPE_BOOL,
        _FDP.TYPE_ENUM,
    },
    {_FDP.TYPE_SINT32, _FDP.TYPE_SINT64},
    {_FDP.TYPE_FIXED32, _FDP.TYPE_SFIXED32},
    {_FDP.TYPE_FIXED64, _FDP.TYPE_SFIXED64},
    {_FDP.TYPE_STRING, _FDP.TYPE_BYTES},
)
_LENGTH_DELIMITED = {_FDP.TYPE_STRING, _FDP.TYPE_BYTES, _FDP.TYPE_MESSAGE}


@dataclass(frozen=True, slots=True, eq=False)
class ProtobufSchema(ParsedSchema):
    text: str
    references: tuple[Reference, ...]
    file: descriptor_pb2.FileDescriptorProto = field(repr=False)
    # every file it imports, directly or not, by import path (well-known types included)
    dependencies: tuple[tuple[str, bytes], ...] = field(repr=False)
    pool: descriptor_pool.DescriptorPool = field(repr=False)
    schema_type: str = PROTOBUF

    def fingerprint(self) -> str:
        """From the compiled file, so that text and descriptor registrations of one schema
        are one schema."""
        canonical = _normalized_file(self.file).SerializeToString(deterministic=True)
        names = ",".join(f"{r.name}={r.subject}/{r.version}" for r in self.references)
        return hashlib.sha256(canonical + b"|" + names.encode()).hexdigest()

    def serialized(self) -> str:
        """Base64 of the file's descriptor (`format=serialized`)."""
        return base64.b64encode(_normalized_file(self.file).SerializeToString()).decode()

    def messages(self) -> list[str]:
        """Full names of the file's messages, nested ones included, in declaration order."""
        found = _messages(self.file.package, self.file.message_type)
        return [name for name, described in found if not described.options.map_entry]

    def message_at(self, indexes: Sequence[int]) -> Any:
        """The message descriptor at Confluent's message-index path ([] or [0]: the first)."""
        path = list(indexes) or [0]
        container, prefix = self.file.message_type, self.file.package
        name = ""
        for index in path:
            if not 0 <= index < len(container):
                raise InvalidSchema(f"Message index {path} is not in the schema.")
            name = f"{prefix}.{container[index].name}" if prefix else container[index].name
            container, prefix = container[index].nested_type, name
        return self.pool.FindMessageTypeByName(name)

    def read_errors(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, ProtobufSchema):
            return [f"A {writer.schema_type} schema cannot be read as PROTOBUF."]
        return _file_errors(self.file, writer.file)


def parse_protobuf(
    text: str, references: Sequence[tuple[Reference, ParsedSchema]]
) -> ProtobufSchema:
    """The Protobuf schema `text` (`.proto` text or a base64 FileDescriptorProto), whose
    `references` are resolved (each a ProtobufSchema, imported by its reference name).

    Raises:
        InvalidSchema: the schema does not compile, or a reference is not Protobuf.
    """
    check_size(text)
    dependencies: dict[str, bytes] = {}
    for reference, parsed in references:
        dependencies.update(parsed.dependencies)
        named = descriptor_pb2.FileDescriptorProto()
        named.CopyFrom(parsed.file)
        named.name = reference.name
        dependencies[reference.name] = named.SerializeToString()
    file = _from_descriptor(text)
    if file is None:
        file, imported = _compile(text, dependencies)
        dependencies.update(imported)
    else:
        file.name = MAIN_FILE
        text = protobuf_text.render(file)
    dependencies.update(_well_known(file, dependencies))
    pool = _pool(file, dependencies)
    return ProtobufSchema(
        text=text.strip(),
        references=tuple(r for r, _ in references),
        file=file,
        dependencies=tuple(dependencies.items()),
        pool=pool,
    )


def _from_descriptor(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The base64 FileDescriptorProto `text` holds, or None when it is `.proto` text."""
    stripped = text.strip()
    if not stripped or any(c.isspace() or c in ";{}" for c in stripped):
        return None
    try:
        payload = base64.b64decode(stripped, validate=True)
        file = descriptor_pb2.FileDescriptorProto.FromString(payload)
    except (binascii.Error, ValueError, message.DecodeError):
        return None
    return file if file.message_type or file.enum_type or file.package else None


def _compile(
    text: str, dependencies: dict[str, bytes]
) -> tuple[descriptor_pb2.FileDescriptorProto, dict[str, bytes]]:
    """protoc's FileDescriptorProto of `text`, and the well-known files it imported."""
    import grpc_tools  # imported here: only registrations of .proto text need protoc

    includes = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory(prefix="lakelog-proto-") as scratch:
        with open(os.path.join(scratch, MAIN_FILE), "w", encoding="utf-8") as source:
            source.write(text)
        known = descriptor_pb2.FileDescriptorSet()
        for body in dependencies.values():
            known.file.append(descriptor_pb2.FileDescriptorProto.FromString(body))
        with open(os.path.join(scratch, "deps.pb"), "wb") as deps:
            deps.write(known.SerializeToString())
        command = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{scratch}",
            f"-I{includes}",
            "--include_imports",
            f"--descriptor_set_out={scratch}/out.pb",
        ]
        if dependencies:
            command.append(f"--descriptor_set_in={scratch}/deps.pb")
        command.append(os.path.join(scratch, MAIN_FILE))
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=PROTOC_TIMEOUT_S,
            cwd=scratch,
            check=False,
        )
        if done.returncode != 0:
            reason = done.stderr.replace(scratch + os.sep, "").strip() or "protoc failed"
            raise InvalidSchema(f"Invalid PROTOBUF schema: {reason}")
        with open(os.path.join(scratch, "out.pb"), "rb") as out:
            compiled = descriptor_pb2.FileDescriptorSet.FromString(out.read())
    files = {f.name: f for f in compiled.file}
    main = files.pop(MAIN_FILE)
    imported = {
        name: f.SerializeToString() for name, f in files.items() if name not in dependencies
    }
    return main, imported


def _well_known(file: descriptor_pb2.FileDescriptorProto, known: dict[str, bytes]) -> dict:
    """google/protobuf/*.proto files a descriptor imports, from the protobuf runtime."""
    found: dict[str, bytes] = {}
    pending = [name for name in file.dependency if name not in known]
    default = descriptor_pool.Default()
    while pending:
        name = pending.pop()
        if name in found or name in known:
            continue
        if not name.startswith("google/protobuf/"):
            raise InvalidSchema(
                f"Invalid PROTOBUF schema: import {name!r} is neither a reference nor a "
                "well-known type: register it and name it in `references`."
            )
        module = name.removeprefix("google/protobuf/").removesuffix(".proto") + "_pb2"
        __import__(f"google.protobuf.{module}")
        proto = descriptor_pb2.FileDescriptorProto()
        default.FindFileByName(name).CopyToProto(proto)
        found[name] = proto.SerializeToString()
        pending.extend(proto.dependency)
    return found


def _pool(
    file: descriptor_pb2.FileDescriptorProto, dependencies: dict[str, bytes]
) -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()
    protos = {n: descriptor_pb2.FileDescriptorProto.FromString(b) for n, b in dependencies.items()}

    def add(proto: descriptor_pb2.FileDescriptorProto) -> None:
        if proto.name in added:
            return
        added.add(proto.name)
        for name in proto.dependency:
            if name in protos:
                add(protos[name])
        pool.Add(proto)

    try:
        add(file)
        pool.FindFileByName(file.name)
    except (TypeError, KeyError, ValueError) as error:
        raise InvalidSchema(f"Invalid PROTOBUF schema: {error}") from error
    return pool


def _normalized_file(
    file: descriptor_pb2.FileDescriptorProto,
) -> descriptor_pb2.FileDescriptorProto:
    """The descriptor without what does not make the schema: its file name, source info and
    protoc's derived JSON names."""
    copy = descriptor_pb2.FileDescriptorProto()
    copy.CopyFrom(file)
    copy.ClearField("name")
    copy.ClearField("source_code_info")
    for _, described in _messages(copy.package, copy.message_type):
        for one in (*described.field, *described.extension):
            one.ClearField("json_name")
    return copy


def _messages(prefix: str, messages: Any) -> Iterator[tuple[str, Any]]:
    for described in messages:
        name = f"{prefix}.{described.name}" if prefix else described.name
        yield name, described
        yield from _messages(name, described.nested_type)


def _file_errors(reader: Any, writer: Any) -> list[str]:
    """Why a reader of `reader`'s messages cannot read what `writer`'s wrote."""
    errors = []
    if reader.package != writer.package:
        errors.append(f"PACKAGE_CHANGED: {writer.package!r} -> {reader.package!r}")
    read = dict(_messages(reader.package, reader.message_type))
    for name, written in _messages(writer.package, writer.message_type):
        if written.options.map_entry:
            continue
        if name not in read:
            errors.append(f"MESSAGE_REMOVED: {name}")
            continue
        errors.extend(f"{name}: {e}" for e in _message_errors(read[name], written))
    return errors


def _message_errors(reader: Any, writer: Any) -> list[str]:
    read_fields = {f.number: f for f in reader.field}
    written_fields = {f.number: f for f in writer.field}
    errors = []
    for number, written in written_fields.items():
        read = read_fields.get(number)
        if read is None:
            if written.label == _FDP.LABEL_REQUIRED:
                errors.append(f"REQUIRED_FIELD_REMOVED: {written.name} ({number})")
            continue
        errors.extend(_field_errors(read, written))
    for number, read in read_fields.items():
        if number not in written_fields and read.label == _FDP.LABEL_REQUIRED:
            errors.append(f"REQUIRED_FIELD_ADDED: {read.name} ({number})")
    errors.extend(_oneof_errors(reader, writer))
    return errors


def _field_errors(read: Any, written: Any) -> list[str]:
    where = f"{written.name} ({written.number})"
    if read.type != written.type:
        if read.type in (_FDP.TYPE_MESSAGE, _FDP.TYPE_GROUP) or written.type in (
            _FDP.TYPE_MESSAGE,
            _FDP.TYPE_GROUP,
        ):
            return [f"FIELD_KIND_CHANGED: {where}"]
        if not any(read.type in group and written.type in group for group in _WIRE_GROUPS):
            return [f"FIELD_SCALAR_KIND_CHANGED: {where}"]
    elif read.type_name.lstrip(".") != written.type_name.lstrip("."):
        return [f"FIELD_NAMED_TYPE_CHANGED: {where}"]
    if read.label == _FDP.LABEL_REQUIRED and written.label != _FDP.LABEL_REQUIRED:
        return [f"REQUIRED_FIELD_ADDED: {where}"]
    repeated = (read.label == _FDP.LABEL_REPEATED, written.label == _FDP.LABEL_REPEATED)
    if repeated[0] != repeated[1] and written.type not in _LENGTH_DELIMITED:
        return [f"FIELD_CARDINALITY_CHANGED: {where}"]
    return []


def _oneof_errors(reader: Any, writer: Any) -> list[str]:
    """A field taken out of its oneof, or fields moved into a oneof together."""

    def oneof_of(described: Any) -> dict[int, str]:
        names = [o.name for o in described.oneof_decl]
        return {
            f.number: names[f.oneof_index]
            for f in described.field
            if f.HasField("oneof_index") and not f.proto3_optional
        }

    read_oneofs, written_oneofs = oneof_of(reader), oneof_of(writer)
    written_numbers = {f.number for f in writer.field}
    errors = []
    for number, oneof in written_oneofs.items():
        if number in {f.number for f in reader.field} and number not in read_oneofs:
            errors.append(f"ONEOF_FIELD_REMOVED: field {number} left oneof {oneof}")
    moved: dict[str, int] = {}
    for number, oneof in read_oneofs.items():
        if number in written_numbers and number not in written_oneofs:
            if oneof in set(written_oneofs.values()):
                errors.append(f"FIELD_MOVED_TO_EXISTING_ONEOF: field {number} into {oneof}")
            moved[oneof] = moved.get(oneof, 0) + 1
    errors.extend(
        f"MULTIPLE_FIELDS_MOVED_TO_ONEOF: {count} fields into {oneof}"
        for oneof, count in moved.items()
        if count > 1
    )
    return errors
