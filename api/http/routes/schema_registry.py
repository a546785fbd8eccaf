"""Confluent Schema Registry's REST API, at its own paths on the gateway's port (they do not
collide with the REST Proxy's): `schema.registry.url=http://<node>:8082` works for unmodified
serializers. Bodies and answers are Confluent's (`application/vnd.schemaregistry.v1+json`),
errors its codes (api/http/errors.py). The registry itself is api/core/schemas/registry.py.

Authorization (api/http/route_rules.py): reading needs an authenticated principal; registering
needs WRITE, and deletes and subject levels or modes ALTER, on the subject (resource type
`subject`) or on the topic a `<topic>-key`/`<topic>-value` subject names; the global level and
mode need ALTER on the cluster.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from api.core.schemas.registry import Registered, SchemaRegistry, SchemaRequest, check_subject
from api.http import access
from api.http.deps import BrokerDep
from api.http.errors import ApiError
from storage_layout.meta.schemas import StoredSchema
from storage_layout.schemas.model import AVRO, PROTOBUF, SCHEMA_TYPES, Reference
from storage_layout.schemas.protobuf_format import ProtobufSchema

router = APIRouter(tags=["schema registry"])

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
Flag = Annotated[bool, Query()]


def _answer(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type=MEDIA_TYPE)


def _registry(broker) -> SchemaRegistry:
    return broker.schemas


async def _run(function, *args, **kwargs):
    return await asyncio.to_thread(function, *args, **kwargs)


# ---- schemas ---------------------------------------------------------------------------------


@router.get("/schemas/types")
async def schema_types() -> Response:
    return _answer(list(SCHEMA_TYPES))


@router.get("/contexts")
async def contexts() -> Response:
    return _answer(["."])


@router.get("/schemas")
async def list_schemas(
    broker: BrokerDep,
    subjectPrefix: str = "",  # noqa: N803 (Confluent's parameter names)
    deleted: Flag = False,
    latestOnly: Flag = False,  # noqa: N803
    offset: int = 0,
    limit: int = -1,
) -> Response:
    registry = _registry(broker)

    def collect() -> list[dict]:
        found = []
        for subject in registry.subjects(prefix=subjectPrefix, deleted=deleted):
            numbers = registry.versions(subject, deleted=deleted)
            for number in numbers[-1:] if latestOnly else numbers:
                found.append(_version_body(registry.version(subject, str(number), deleted=True)))
        return found

    found = await _run(collect)
    end = None if limit < 0 else offset + limit
    return _answer(found[max(offset, 0) : end])


@router.get("/schemas/ids/{schema_id}")
async def schema_by_id(
    schema_id: int, broker: BrokerDep, subject: str = "", format: str = ""
) -> Response:
    registry = _registry(broker)
    stored = await _run(registry.schema_by_id, schema_id)
    body = _schema_body(stored, await _run(_text_in, registry, stored, format))
    return _answer(body)


@router.get("/schemas/ids/{schema_id}/schema")
async def raw_schema_by_id(schema_id: int, broker: BrokerDep, format: str = "") -> Response:
    registry = _registry(broker)
    stored = await _run(registry.schema_by_id, schema_id)
    return _raw(await _run(_text_in, registry, stored, format), stored)


@router.get("/schemas/guids/{guid}")
async def schema_by_guid(guid: str, broker: BrokerDep, format: str = "") -> Response:
    registry = _registry(broker)
    stored = await _run(registry.schema_by_guid, guid)
    return _answer(_schema_body(stored, await _run(_text_in, registry, stored, format)))


@router.get("/schemas/ids/{schema_id}/subjects")
async def subjects_of_id(schema_id: int, broker: BrokerDep, deleted: Flag = False) -> Response:
    found = await _run(_registry(broker).subject_versions_of, schema_id, deleted=deleted)
    return _answer(sorted({v.subject for v in found}))


@router.get("/schemas/ids/{schema_id}/versions")
async def versions_of_id(schema_id: int, broker: BrokerDep, deleted: Flag = False) -> Response:
    found = await _run(_registry(broker).subject_versions_of, schema_id, deleted=deleted)
    return _answer([{"subject": v.subject, "version": v.version} for v in found])


# ---- subjects --------------------------------------------------------------------------------


@router.get("/subjects")
async def list_subjects(
    broker: BrokerDep,
    subjectPrefix: str = "",  # noqa: N803
    deleted: Flag = False,
    deletedOnly: Flag = False,  # noqa: N803
) -> Response:
    registry = _registry(broker)
    every = await _run(registry.subjects, prefix=subjectPrefix, deleted=deleted or deletedOnly)
    if deletedOnly:
        live = set(await _run(registry.subjects, prefix=subjectPrefix))
        every = [s for s in every if s not in live]
    return _answer(every)


@router.get("/subjects/{subject}/versions")
async def list_versions(subject: str, broker: BrokerDep, deleted: Flag = False) -> Response:
    return _answer(await _run(_registry(broker).versions, subject, deleted=deleted))


@router.post("/subjects/{subject}/versions")
async def register(
    subject: str, request: Request, broker: BrokerDep, normalize: Flag = False
) -> Response:
    access.require_subject(request, "WRITE", subject)
    schema_request = _schema_request(await request.body(), registering=True)
    registered = await _run(
        _registry(broker).register, subject, schema_request, normalize=normalize
    )
    return _answer({"id": registered.schema.id, **_version_body(registered)})


@router.post("/subjects/{subject}")
async def lookup(
    subject: str,
    request: Request,
    broker: BrokerDep,
    normalize: Flag = False,
    deleted: Flag = False,
) -> Response:
    schema_request = _schema_request(await request.body())
    registered = await _run(
        _registry(broker).lookup, subject, schema_request, normalize=normalize, deleted=deleted
    )
    return _answer(_version_body(registered))


@router.delete("/subjects/{subject}")
async def delete_subject(
    subject: str, request: Request, broker: BrokerDep, permanent: Flag = False
) -> Response:
    access.require_subject(request, "ALTER", subject)
    return _answer(await _run(_registry(broker).delete_subject, subject, permanent=permanent))


@router.get("/subjects/{subject}/versions/{version}")
async def get_version(
    subject: str, version: str, broker: BrokerDep, deleted: Flag = False, format: str = ""
) -> Response:
    registry = _registry(broker)
    registered = await _run(registry.version, subject, version, deleted=deleted)
    text = await _run(_text_in, registry, registered.schema, format)
    return _answer(_version_body(registered, text))


@router.get("/subjects/{subject}/versions/{version}/schema")
async def get_raw_version(
    subject: str, version: str, broker: BrokerDep, deleted: Flag = False, format: str = ""
) -> Response:
    registry = _registry(broker)
    registered = await _run(registry.version, subject, version, deleted=deleted)
    return _raw(await _run(_text_in, registry, registered.schema, format), registered.schema)


@router.get("/subjects/{subject}/versions/{version}/referencedby")
async def referenced_by(subject: str, version: str, broker: BrokerDep) -> Response:
    return _answer(await _run(_registry(broker).referenced_by, subject, version))


@router.delete("/subjects/{subject}/versions/{version}")
async def delete_version(
    subject: str, version: str, request: Request, broker: BrokerDep, permanent: Flag = False
) -> Response:
    access.require_subject(request, "ALTER", subject)
    registry = _registry(broker)
    return _answer(await _run(registry.delete_version, subject, version, permanent=permanent))


# ---- compatibility ---------------------------------------------------------------------------


@router.post("/compatibility/subjects/{subject}/versions/{version}")
async def check_version(
    subject: str,
    version: str,
    request: Request,
    broker: BrokerDep,
    verbose: Flag = False,
    normalize: Flag = False,
) -> Response:
    return await _compatibility(subject, version, request, broker, verbose, normalize)


@router.post("/compatibility/subjects/{subject}/versions")
async def check_versions(
    subject: str,
    request: Request,
    broker: BrokerDep,
    verbose: Flag = False,
    normalize: Flag = False,
) -> Response:
    return await _compatibility(subject, None, request, broker, verbose, normalize)


async def _compatibility(subject, version, request, broker, verbose, normalize) -> Response:
    schema_request = _schema_request(await request.body())
    messages = await _run(
        _registry(broker).check_compatibility,
        subject,
        version,
        schema_request,
        normalize=normalize,
    )
    body: dict[str, Any] = {"is_compatible": not messages}
    if verbose:
        body["messages"] = messages
    return _answer(body)


# ---- compatibility levels and modes ----------------------------------------------------------


@router.get("/config")
async def get_global_config(broker: BrokerDep) -> Response:
    level = await _run(_registry(broker).compatibility, None, default_to_global=True)
    return _answer({"compatibilityLevel": level})


@router.put("/config")
async def put_global_config(request: Request, broker: BrokerDep) -> Response:
    level = _field(await request.body(), "compatibility")
    return _answer({"compatibility": await _run(_registry(broker).set_compatibility, None, level)})


@router.delete("/config")
async def delete_global_config(broker: BrokerDep) -> Response:
    previous = await _run(_registry(broker).delete_compatibility, None)
    return _answer({"compatibilityLevel": previous})


@router.get("/config/{subject}")
async def get_config(subject: str, broker: BrokerDep, defaultToGlobal: Flag = False) -> Response:  # noqa: N803
    registry = _registry(broker)
    level = await _run(registry.compatibility, subject, default_to_global=defaultToGlobal)
    return _answer({"compatibilityLevel": level})


@router.put("/config/{subject}")
async def put_config(subject: str, request: Request, broker: BrokerDep) -> Response:
    access.require_subject(request, "ALTER", subject)
    level = _field(await request.body(), "compatibility")
    registry = _registry(broker)
    return _answer({"compatibility": await _run(registry.set_compatibility, subject, level)})


@router.delete("/config/{subject}")
async def delete_config(subject: str, request: Request, broker: BrokerDep) -> Response:
    access.require_subject(request, "ALTER", subject)
    previous = await _run(_registry(broker).delete_compatibility, subject)
    return _answer({"compatibilityLevel": previous})


@router.get("/mode")
async def get_global_mode(broker: BrokerDep) -> Response:
    return _answer({"mode": await _run(_registry(broker).mode, None, default_to_global=True)})


@router.put("/mode")
async def put_global_mode(request: Request, broker: BrokerDep, force: Flag = False) -> Response:
    mode = _field(await request.body(), "mode")
    return _answer({"mode": await _run(_registry(broker).set_mode, None, mode, force=force)})


@router.get("/mode/{subject}")
async def get_mode(subject: str, broker: BrokerDep, defaultToGlobal: Flag = False) -> Response:  # noqa: N803
    registry = _registry(broker)
    return _answer({"mode": await _run(registry.mode, subject, default_to_global=defaultToGlobal)})


@router.put("/mode/{subject}")
async def put_mode(
    subject: str, request: Request, broker: BrokerDep, force: Flag = False
) -> Response:
    access.require_subject(request, "ALTER", subject)
    check_subject(subject)
    mode = _field(await request.body(), "mode")
    return _answer({"mode": await _run(_registry(broker).set_mode, subject, mode, force=force)})


@router.delete("/mode/{subject}")
async def delete_mode(subject: str, request: Request, broker: BrokerDep) -> Response:
    access.require_subject(request, "ALTER", subject)
    return _answer({"mode": await _run(_registry(broker).delete_mode, subject)})


# ---- bodies ----------------------------------------------------------------------------------


def _json_body(raw: bytes) -> dict:
    try:
        body = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError as error:
        raise ApiError(400, 400, f"The body is not JSON: {error}.") from error
    if not isinstance(body, dict):
        raise ApiError(400, 400, "The body must be a JSON object.")
    return body


def _field(raw: bytes, name: str) -> object:
    body = _json_body(raw)
    if name not in body:
        raise ApiError(422, 422, f"The body needs a `{name}` field.")
    return body[name]


def _schema_request(raw: bytes, *, registering: bool = False) -> SchemaRequest:
    """A schema as the client sent it: `schema`, `schemaType` (AVRO), `references`, and in
    IMPORT mode `id` and `version`."""
    body = _json_body(raw)
    text = body.get("schema")
    if not isinstance(text, str):
        raise ApiError(422, 42201, "Invalid schema: give the schema as a string in `schema`.")
    schema_type = body.get("schemaType") or AVRO
    if not isinstance(schema_type, str):
        raise ApiError(422, 42201, "Invalid schema: `schemaType` is a string.")
    return SchemaRequest(
        text=text,
        schema_type=schema_type.upper(),
        references=_references(body.get("references")),
        schema_id=_optional_int(body, "id") if registering else None,
        version=_optional_int(body, "version") if registering else None,
    )


def _references(raw: object) -> tuple[Reference, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ApiError(422, 42201, "Invalid schema: `references` is a list.")
    references = []
    for item in raw:
        if not (
            isinstance(item, dict)
            and isinstance(item.get("name"), str)
            and isinstance(item.get("subject"), str)
            and isinstance(item.get("version"), int)
        ):
            raise ApiError(
                422,
                42201,
                'Invalid schema: each reference is {"name": str, "subject": str, "version": int}.',
            )
        references.append(Reference(item["name"], item["subject"], item["version"]))
    return tuple(references)


ID_MAX = 2**31 - 1  # ids and versions are int32 (the wire format has 4 bytes for an id)


def _optional_int(body: dict, name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= ID_MAX:
        return value
    raise ApiError(422, 422, f"`{name}` must be an integer from 1 to {ID_MAX}.")


# ---- answers ---------------------------------------------------------------------------------


def _text_in(registry: SchemaRegistry, stored: StoredSchema, fmt: str) -> str:
    """The schema's text in `format`: `serialized` gives a Protobuf schema's base64
    descriptor, as Confluent's Python deserializer asks; anything else the canonical text."""
    if fmt == "serialized" and stored.schema_type == PROTOBUF:
        parsed = registry.parsed(stored)
        if isinstance(parsed, ProtobufSchema):
            return parsed.serialized()
    return stored.text


def _schema_body(stored: StoredSchema, text: str) -> dict:
    body: dict[str, Any] = {"schema": text}
    if stored.schema_type != AVRO:
        body["schemaType"] = stored.schema_type
    if stored.references:
        body["references"] = [r.to_json() for r in stored.references]
    body["id"] = stored.id
    body["guid"] = stored.guid
    return body


def _version_body(registered: Registered, text: str | None = None) -> dict:
    version, stored = registered.version, registered.schema
    body = {"subject": version.subject, "version": version.version}
    body.update(_schema_body(stored, stored.text if text is None else text))
    if version.deleted:
        body["deleted"] = True
    return body


def _raw(text: str, stored: StoredSchema) -> Response:
    """`/schema` routes answer the schema itself: JSON for Avro and JSON Schema, text for
    Protobuf."""
    if stored.schema_type == PROTOBUF:
        return Response(text, 200, media_type="text/plain")
    return Response(text.encode(), 200, media_type=MEDIA_TYPE)
