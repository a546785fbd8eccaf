"""`lakelog principals|api-keys|acls|quotas`: manage the security stores directly under
`--data-dir`, as Kafka's `kafka-acls`/`kafka-configs` manage ZooKeeper/KRaft metadata.

Gateways pick changes up within `LAKELOG_SECURITY_REFRESH_MS` (new API keys at once).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import sys
import time


class CommandFailed(Exception):
    """A failure reported in one line on stderr (exit code 1)."""


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")


ACL_RESOURCE_FLAGS = (
    ("topic", "topic"),
    ("group", "group"),
    ("transactional_id", "transactional_id"),
    ("subject", "subject"),  # a schema registry subject (lakelog's own resource type)
)


def add_commands(commands) -> None:
    _add_principals(commands)
    _add_api_keys(commands)
    _add_acls(commands)
    _add_quotas(commands)
    _add_scram(commands)


def _data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir", help="storage root shared by the gateways (default: $LAKELOG_DATA_DIR)"
    )


def _handler(function):
    """Run with the stores of `--data-dir`; invalid input becomes a one-line CLI error."""

    @functools.wraps(function)
    def run(args) -> int:
        from conf.settings import load_settings
        from storage_layout import store
        from storage_layout.errors import StorageError

        settings = load_settings(data_dir=args.data_dir)
        store.configure(settings.storage_options)
        args.root = settings.data_dir
        try:
            return function(args) or 0
        except (StorageError, CommandFailed) as error:
            sys.stderr.write(f"lakelog: error: {error}\n")
            return 1

    return run


def _principal_store(args):
    from storage_layout.meta.principals import PrincipalStore

    return PrincipalStore(args.root)


def _acl_store(args):
    from storage_layout.meta.acls import AclStore

    return AclStore(args.root)


# ---- principals and API keys ---------------------------------------------------------------


def _add_principals(commands) -> None:
    parser = commands.add_parser("principals", help="add, list, remove principals (User:<name>)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, handler, text in (
        ("add", _principals_add, "add a principal"),
        ("remove", _principals_remove, "remove a principal, its API keys and quotas"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("principal", help="User:<name> (or just <name>)")
        _data_dir(action)
        action.set_defaults(handler=_handler(handler))
    listing = actions.add_parser("list", help="list principals")
    _data_dir(listing)
    listing.set_defaults(handler=_handler(_principals_list))


def _principals_add(args) -> int:
    _out(_principal_store(args).add_principal(args.principal))
    return 0


def _principals_list(args) -> int:
    for principal in _principal_store(args).principals():
        _out(principal)
    return 0


def _principals_remove(args) -> int:
    if not _principal_store(args).remove_principal(args.principal):
        raise CommandFailed(f"No principal '{args.principal}'.")
    return 0


def _add_api_keys(commands) -> None:
    parser = commands.add_parser("api-keys", help="create, list, revoke API keys")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a key; prints <key_id>.<secret> once")
    create.add_argument("--principal", required=True)
    create.add_argument("--expires-in-s", type=float, help="the key stops working after this")
    _data_dir(create)
    create.set_defaults(handler=_handler(_keys_create))
    listing = actions.add_parser("list", help="key ids, principals, creation and expiry")
    listing.add_argument("--principal")
    _data_dir(listing)
    listing.set_defaults(handler=_handler(_keys_list))
    revoke = actions.add_parser("revoke", help="revoke a key (gateways stop accepting it)")
    revoke.add_argument("key_id")
    _data_dir(revoke)
    revoke.set_defaults(handler=_handler(_keys_revoke))


def _keys_create(args) -> int:
    expires_at_ms = None
    if args.expires_in_s is not None:
        expires_at_ms = int((time.time() + args.expires_in_s) * 1000)
    key_id, secret = _principal_store(args).create_key(args.principal, expires_at_ms=expires_at_ms)
    _out(f"{key_id}.{secret}")  # shown once: only its hash is stored
    return 0


def _keys_list(args) -> int:
    from storage_layout.meta.principals import normalize_principal

    principal = normalize_principal(args.principal) if args.principal else None
    for key in _principal_store(args).api_keys(principal):
        expires = "-" if key.expires_at_ms is None else _iso(key.expires_at_ms)
        _out(f"{key.key_id}\t{key.principal}\tcreated={_iso(key.created_at_ms)}\texpires={expires}")
    return 0


def _keys_revoke(args) -> int:
    if not _principal_store(args).revoke_key(args.key_id):
        raise CommandFailed(f"No API key '{args.key_id}'.")
    return 0


def _iso(time_ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time_ms / 1000))


# ---- ACLs ----------------------------------------------------------------------------------


def _add_acls(commands) -> None:
    parser = commands.add_parser("acls", help="add, list, remove ACLs (kafka-acls' flags)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, handler, text in (
        ("add", _acls_add, "add ACLs: each principal x operation x resource"),
        ("list", _acls_list, "list ACLs (of the given resources / principals)"),
        ("remove", _acls_remove, "remove the matching ACLs"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("--allow-principal", action="append", default=[])
        action.add_argument("--deny-principal", action="append", default=[])
        action.add_argument("--principal", action="append", default=[], help="list/remove filter")
        action.add_argument("--allow-host", default="*")
        action.add_argument("--deny-host", default="*")
        action.add_argument("--operation", action="append", default=[])
        action.add_argument("--topic", action="append", default=[])
        action.add_argument("--group", action="append", default=[])
        action.add_argument("--transactional-id", action="append", default=[])
        action.add_argument(
            "--subject", action="append", default=[], help="a schema registry subject"
        )
        action.add_argument("--cluster", action="store_true")
        action.add_argument(
            "--resource-pattern-type", default=None, help="literal (default) or prefixed"
        )
        _data_dir(action)
        action.set_defaults(handler=_handler(handler))


def _resources(args) -> list[tuple[str, str]]:
    from api.security.authorizer import CLUSTER_RESOURCE_NAME

    found = [("cluster", CLUSTER_RESOURCE_NAME)] if args.cluster else []
    for flag, resource_type in ACL_RESOURCE_FLAGS:
        found += [(resource_type, name) for name in getattr(args, flag)]
    return found


def _bindings(args) -> list:
    from storage_layout.meta.acls import AclBinding

    principals = [(p, "allow", args.allow_host) for p in args.allow_principal]
    principals += [(p, "deny", args.deny_host) for p in args.deny_principal]
    resources = _resources(args)
    if not principals or not args.operation or not resources:
        raise CommandFailed(
            "Give --allow-principal/--deny-principal, --operation and a resource (--topic, "
            "--group, --cluster, --transactional-id)."
        )
    return [
        AclBinding.parse(
            principal=principal,
            permission=permission,
            host=host,
            operation=operation,
            resource_type=resource_type,
            resource_name=name,
            pattern_type=args.resource_pattern_type or "literal",
        )
        for (principal, permission, host), operation, (resource_type, name) in itertools.product(
            principals, args.operation, resources
        )
    ]


def _filters(args) -> list:
    """Filters for list/remove: each given resource x principal, unset fields matching any."""
    from storage_layout.meta.acls import AclFilter

    principals = args.principal + args.allow_principal + args.deny_principal
    resources = _resources(args) or [(None, None)]
    operations = [op.upper() for op in args.operation] or [None]
    return [
        AclFilter(
            principal=None if p is None else (p if p.startswith("User:") else f"User:{p}"),
            operation=op,
            resource_type=rtype,
            resource_name=name,
            pattern_type=args.resource_pattern_type,
        )
        for p, op, (rtype, name) in itertools.product(principals or [None], operations, resources)
    ]


def _acls_add(args) -> int:
    store = _acl_store(args)
    for binding in _bindings(args):
        store.add(binding)
        _out(_acl_line(binding))
    return 0


def _acls_list(args) -> int:
    store = _acl_store(args)
    seen = set()
    for acl_filter in _filters(args):
        for binding in store.bindings(acl_filter):
            if binding not in seen:
                seen.add(binding)
                _out(_acl_line(binding))
    return 0


def _acls_remove(args) -> int:
    filters = _filters(args)
    if not _resources(args) and not (args.principal + args.allow_principal + args.deny_principal):
        raise CommandFailed(
            "Give a resource or a principal: removing every ACL needs them spelled out."
        )
    store = _acl_store(args)
    for acl_filter in filters:
        for binding in store.remove(acl_filter):
            _out(f"removed {_acl_line(binding)}")
    return 0


def _acl_line(b) -> str:
    return (
        f"{b.principal} {b.permission.upper()} {b.operation} from {b.host} on "
        f"{b.resource_type}:{b.pattern_type.upper()}:{b.resource_name}"
    )


# ---- quotas --------------------------------------------------------------------------------


def _add_quotas(commands) -> None:
    parser = commands.add_parser("quotas", help="per-principal byte-rate quota overrides")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    set_ = actions.add_parser("set", help="set a principal's produce/fetch bytes per second")
    set_.add_argument("--principal", required=True)
    set_.add_argument("--produce-bytes-per-s", type=int)
    set_.add_argument("--fetch-bytes-per-s", type=int)
    _data_dir(set_)
    set_.set_defaults(handler=_handler(_quotas_set))
    listing = actions.add_parser("list", help="overrides per principal")
    _data_dir(listing)
    listing.set_defaults(handler=_handler(_quotas_list))
    remove = actions.add_parser("remove", help="back to the gateway defaults")
    remove.add_argument("--principal", required=True)
    _data_dir(remove)
    remove.set_defaults(handler=_handler(_quotas_remove))


def _quotas_set(args) -> int:
    from storage_layout.meta.principals import Quota

    quota = Quota(args.produce_bytes_per_s, args.fetch_bytes_per_s)
    _principal_store(args).set_quota(args.principal, quota)
    return 0


def _quotas_list(args) -> int:
    for principal, quota in sorted(_principal_store(args).quotas().items()):
        produce, fetch = quota.produce_bytes_per_s, quota.fetch_bytes_per_s
        _out(f"{principal}\tproduce_bytes_per_s={produce}\tfetch_bytes_per_s={fetch}")
    return 0


def _quotas_remove(args) -> int:
    _principal_store(args).remove_quota(args.principal)
    return 0


# ---- SCRAM credentials -------------------------------------------------------------------


def _add_scram(commands) -> None:
    parser = commands.add_parser(
        "scram", help="SCRAM-SHA-256/512 credentials for the Kafka listener (stored salted)"
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    set_ = actions.add_parser("set", help="set a principal's credential (password on stdin)")
    set_.add_argument("--principal", required=True)
    set_.add_argument("--mechanism", default="SCRAM-SHA-256",
                      choices=["SCRAM-SHA-256", "SCRAM-SHA-512"])  # fmt: skip
    set_.add_argument("--iterations", type=int, default=8192)
    _data_dir(set_)
    set_.set_defaults(handler=_handler(_scram_set))
    listing = actions.add_parser("list", help="credentials per principal (never a secret)")
    _data_dir(listing)
    listing.set_defaults(handler=_handler(_scram_list))
    remove = actions.add_parser("remove", help="remove a principal's credential")
    remove.add_argument("--principal", required=True)
    remove.add_argument("--mechanism", required=True, choices=["SCRAM-SHA-256", "SCRAM-SHA-512"])
    _data_dir(remove)
    remove.set_defaults(handler=_handler(_scram_remove))


def _scram_set(args) -> int:
    from api.security.errors import SecurityError
    from api.security.scram import credential_from_password
    from storage_layout.meta.principals import normalize_principal

    password = sys.stdin.readline().rstrip("\n")
    if not password:
        raise CommandFailed("Give the password on stdin (one line).")
    principal = normalize_principal(args.principal)
    try:
        credential = credential_from_password(principal, args.mechanism, password, args.iterations)
    except SecurityError as error:
        raise CommandFailed(str(error)) from None
    _principal_store(args).set_scram(credential)
    return 0


def _scram_list(args) -> int:
    for credential in _principal_store(args).scram_credentials():
        _out(f"{credential.principal}\t{credential.mechanism}\titerations={credential.iterations}")
    return 0


def _scram_remove(args) -> int:
    if not _principal_store(args).remove_scram(args.principal, args.mechanism):
        raise CommandFailed(f"{args.principal} has no {args.mechanism} credential.")
    return 0
