"""A FileDescriptorProto printed as `.proto` text: how a schema registered as a descriptor is
served (Confluent's registry answers text unless `format=serialized` is asked for). What it
prints compiles back to the same descriptor, file options aside: syntax, package, imports,
messages with their nested types, fields, oneofs and maps, enums, and services."""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2

_FDP = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    getattr(_FDP, f"TYPE_{name.upper()}"): name
    for name in (
        "double",
        "float",
        "int64",
        "uint64",
        "int32",
        "fixed64",
        "fixed32",
        "bool",
        "string",
        "bytes",
        "uint32",
        "sfixed32",
        "sfixed64",
        "sint32",
        "sint64",
    )
}
_FILE_OPTIONS = ("java_package", "java_outer_classname", "go_package", "csharp_namespace")
_INDENT = "  "


def render(file: descriptor_pb2.FileDescriptorProto) -> str:
    syntax = file.syntax or "proto2"
    lines = [f'syntax = "{syntax}";']
    if file.package:
        lines.append(f"package {file.package};")
    lines.extend(f'import "{name}";' for name in file.dependency)
    for option in _FILE_OPTIONS:
        if file.options.HasField(option):
            lines.append(f'option {option} = "{getattr(file.options, option)}";')
    if file.options.HasField("java_multiple_files"):
        lines.append(f"option java_multiple_files = {_bool(file.options.java_multiple_files)};")
    lines.append("")
    for described in file.message_type:
        lines.extend(_message(described, syntax, 0))
    for enum in file.enum_type:
        lines.extend(_enum(enum, 0))
    for service in file.service:
        lines.extend(_service(service))
    return "\n".join(lines).rstrip() + "\n"


def _message(described: Any, syntax: str, depth: int) -> list[str]:
    pad = _INDENT * depth
    lines = [f"{pad}message {described.name} {{"]
    maps = {n.name: n for n in described.nested_type if n.options.map_entry}
    for nested in described.nested_type:
        if nested.name not in maps:
            lines.extend(_message(nested, syntax, depth + 1))
    for enum in described.enum_type:
        lines.extend(_enum(enum, depth + 1))
    oneofs: dict[int, list[Any]] = {}
    for one in described.field:
        if one.HasField("oneof_index") and not one.proto3_optional:
            oneofs.setdefault(one.oneof_index, []).append(one)
            continue
        lines.append(f"{pad}{_INDENT}{_field(one, syntax, maps)}")
    for index, members in oneofs.items():
        lines.append(f"{pad}{_INDENT}oneof {described.oneof_decl[index].name} {{")
        lines.extend(f"{pad}{_INDENT * 2}{_field(m, 'proto3', maps)}" for m in members)
        lines.append(f"{pad}{_INDENT}}}")
    for reserved in described.reserved_range:
        end = reserved.end - 1
        span = str(reserved.start) if end == reserved.start else f"{reserved.start} to {end}"
        lines.append(f"{pad}{_INDENT}reserved {span};")
    if described.reserved_name:
        names = ", ".join(f'"{name}"' for name in described.reserved_name)
        lines.append(f"{pad}{_INDENT}reserved {names};")
    lines.append(f"{pad}}}")
    return lines


def _field(one: Any, syntax: str, maps: dict[str, Any]) -> str:
    entry = maps.get(one.type_name.rsplit(".", 1)[-1]) if one.type == _FDP.TYPE_MESSAGE else None
    if entry is not None and one.label == _FDP.LABEL_REPEATED:
        key, value = entry.field[0], entry.field[1]
        kind = f"map<{_type(key)}, {_type(value)}>"
        return f"{kind} {one.name} = {one.number};"
    label = ""
    if one.label == _FDP.LABEL_REPEATED:
        label = "repeated "
    elif one.label == _FDP.LABEL_REQUIRED:
        label = "required "
    elif syntax == "proto2" or one.proto3_optional:
        label = "optional "
    options = []
    if one.HasField("default_value"):
        default = one.default_value
        quoted = one.type in (_FDP.TYPE_STRING, _FDP.TYPE_BYTES)
        options.append(f'default = "{default}"' if quoted else f"default = {default}")
    if one.options.HasField("packed"):
        options.append(f"packed = {_bool(one.options.packed)}")
    suffix = f" [{', '.join(options)}]" if options else ""
    return f"{label}{_type(one)} {one.name} = {one.number}{suffix};"


def _type(one: Any) -> str:
    if one.type in (_FDP.TYPE_MESSAGE, _FDP.TYPE_ENUM, _FDP.TYPE_GROUP):
        return one.type_name if one.type_name.startswith(".") else one.type_name
    return _SCALARS[one.type]


def _enum(enum: Any, depth: int) -> list[str]:
    pad = _INDENT * depth
    lines = [f"{pad}enum {enum.name} {{"]
    if enum.options.HasField("allow_alias"):
        lines.append(f"{pad}{_INDENT}option allow_alias = {_bool(enum.options.allow_alias)};")
    lines.extend(f"{pad}{_INDENT}{value.name} = {value.number};" for value in enum.value)
    lines.append(f"{pad}}}")
    return lines


def _service(service: Any) -> list[str]:
    lines = [f"service {service.name} {{"]
    for method in service.method:
        request = ("stream " if method.client_streaming else "") + method.input_type
        response = ("stream " if method.server_streaming else "") + method.output_type
        lines.append(f"{_INDENT}rpc {method.name}({request}) returns ({response});")
    lines.append("}")
    return lines


def _bool(value: bool) -> str:
    return "true" if value else "false"
