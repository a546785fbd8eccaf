"""`lakelog schemas`: the schema registry from the command line, over a gateway's registry API
(Confluent's paths), as Confluent's tools use it: list subjects, register a schema file, show a
version or an id, check compatibility, delete, read and set compatibility levels."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from api.cli_http import CliError, bootstrap_option, call, gateway_client, print_table

EXIT_OK, EXIT_INCOMPATIBLE = 0, 1
SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")
_SR_TYPE = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def add_commands(commands) -> None:
    schemas = commands.add_parser(
        "schemas", help="list, register, show, check and delete schemas (the schema registry)"
    )
    actions = schemas.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="subjects with their latest version")
    listing.add_argument("--subject-prefix", default="")
    listing.add_argument("--deleted", action="store_true", help="include soft-deleted subjects")
    listing.set_defaults(handler=_list)
    register = actions.add_parser("register", help="register a schema file under a subject")
    _schema_arguments(register)
    register.add_argument("--normalize", action="store_true")
    register.set_defaults(handler=_register)
    show = actions.add_parser("show", help="a subject's version (default latest), or an id")
    which = show.add_mutually_exclusive_group(required=True)
    which.add_argument("--subject")
    which.add_argument("--id", type=int)
    show.add_argument("--version", default="latest")
    show.set_defaults(handler=_show)
    check = actions.add_parser(
        "compatibility", help="whether a schema file may follow a subject (exit 1 if not)"
    )
    _schema_arguments(check)
    check.add_argument("--version", help="one version (default: those the level checks)")
    check.set_defaults(handler=_check)
    delete = actions.add_parser("delete", help="soft-delete (or --permanent) a subject/version")
    delete.add_argument("--subject", required=True)
    delete.add_argument("--version", help="one version (default: the whole subject)")
    delete.add_argument("--permanent", action="store_true")
    delete.set_defaults(handler=_delete)
    config = actions.add_parser("config", help="show or set a compatibility level")
    config.add_argument("--subject", help="one subject (default: the global level)")
    config.add_argument("--compatibility", help="the level to set")
    config.set_defaults(handler=_config)
    for action in (listing, register, show, check, delete, config):
        bootstrap_option(action)


def _schema_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--subject", required=True)
    parser.add_argument("--schema-file", required=True, type=Path)
    parser.add_argument("--type", choices=SCHEMA_TYPES, help="default: from the file's suffix")
    parser.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="NAME=SUBJECT:VERSION",
        help="a schema this one references",
    )


def _list(args) -> int:
    with gateway_client(args) as client:
        params = {"subjectPrefix": args.subject_prefix, "deleted": str(args.deleted).lower()}
        rows = []
        for subject in call(client, "GET", "/subjects", params=params).json():
            latest = call(client, "GET", f"/subjects/{_quoted(subject)}/versions/latest").json()
            kind = latest.get("schemaType", "AVRO")
            rows.append((subject, latest["version"], latest["id"], kind))
    print_table(("SUBJECT", "LATEST VERSION", "ID", "TYPE"), rows)
    return EXIT_OK


def _register(args) -> int:
    body = _schema_body(args)
    with gateway_client(args) as client:
        path = f"/subjects/{_quoted(args.subject)}/versions"
        answer = call(
            client,
            "POST",
            path,
            content=json.dumps(body),
            headers=_SR_TYPE,
            params={"normalize": str(args.normalize).lower()},
        ).json()
    print(f"Registered {args.subject} version {answer['version']}: id {answer['id']}.")
    return EXIT_OK


def _show(args) -> int:
    with gateway_client(args) as client:
        if args.id is not None:
            answer = call(client, "GET", f"/schemas/ids/{args.id}").json()
        else:
            path = f"/subjects/{_quoted(args.subject)}/versions/{args.version}"
            answer = call(client, "GET", path).json()
    kind = answer.get("schemaType", "AVRO")
    where = f"{answer['subject']} version {answer['version']}, " if "subject" in answer else ""
    print(f"# {where}id {answer['id']}, {kind}")
    for reference in answer.get("references") or ():
        print(f"# references {reference['name']} = {reference['subject']}:{reference['version']}")
    print(_pretty(answer["schema"], kind))
    return EXIT_OK


def _check(args) -> int:
    body = _schema_body(args)
    path = f"/compatibility/subjects/{_quoted(args.subject)}/versions"
    if args.version:
        path += f"/{args.version}"
    with gateway_client(args) as client:
        answer = call(
            client,
            "POST",
            path,
            content=json.dumps(body),
            headers=_SR_TYPE,
            params={"verbose": "true"},
        ).json()
    if answer["is_compatible"]:
        print(f"Compatible with {args.subject}.")
        return EXIT_OK
    print(f"Not compatible with {args.subject}:")
    for message in answer.get("messages") or ():
        print(f"  {message}")
    return EXIT_INCOMPATIBLE


def _delete(args) -> int:
    path = f"/subjects/{_quoted(args.subject)}"
    if args.version:
        path += f"/versions/{args.version}"
    with gateway_client(args) as client:
        answer = call(
            client, "DELETE", path, params={"permanent": str(args.permanent).lower()}
        ).json()
    how = "Permanently deleted" if args.permanent else "Soft-deleted"
    versions = answer if isinstance(answer, list) else [answer]
    print(f"{how} {args.subject} version(s) {', '.join(map(str, versions))}.")
    return EXIT_OK


def _config(args) -> int:
    path = "/config" if args.subject is None else f"/config/{_quoted(args.subject)}"
    with gateway_client(args) as client:
        if args.compatibility:
            body = json.dumps({"compatibility": args.compatibility})
            level = call(client, "PUT", path, content=body, headers=_SR_TYPE).json()
            print(f"Compatibility of {args.subject or 'the registry'}: {level['compatibility']}.")
            return EXIT_OK
        params = {"defaultToGlobal": "true"} if args.subject else None
        level = call(client, "GET", path, params=params).json()
    print(f"Compatibility of {args.subject or 'the registry'}: {level['compatibilityLevel']}.")
    return EXIT_OK


def _schema_body(args) -> dict:
    try:
        text = args.schema_file.read_text(encoding="utf-8")
    except OSError as error:
        raise CliError(f"cannot read {args.schema_file}: {error.strerror}") from None
    body: dict = {"schema": text, "schemaType": args.type or _type_of(args.schema_file)}
    if args.reference:
        body["references"] = [_reference(item) for item in args.reference]
    return body


def _type_of(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".proto":
        return "PROTOBUF"
    if suffix == ".json":
        return "JSON"
    return "AVRO"  # .avsc and anything else, as the registry defaults


def _reference(item: str) -> dict:
    name, _, target = item.partition("=")
    subject, _, version = target.rpartition(":")
    if not (name and subject and version.isdigit()):
        raise CliError(
            f"--reference {item!r}: use NAME=SUBJECT:VERSION, e.g. common.proto=common:1"
        )
    return {"name": name, "subject": subject, "version": int(version)}


def _pretty(text: str, kind: str) -> str:
    if kind == "PROTOBUF":
        return text
    try:
        return json.dumps(json.loads(text), indent=2)
    except ValueError:
        return text


def _quoted(subject: str) -> str:
    from urllib.parse import quote

    return quote(subject, safe="")
