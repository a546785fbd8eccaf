"""`lakelog schemas` run as a real subprocess against the session gateway's registry."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_cli import _assert_ok, _assert_one_line_error, cli

pytestmark = pytest.mark.gateway


def _record(*fields: dict) -> str:
    return json.dumps({"type": "record", "name": "Sale", "namespace": "cli", "fields": fields})


def test_register_list_show_check_config_and_delete(gateway, topic_name, tmp_path):
    subject = f"{topic_name}-value"
    v1 = tmp_path / "sale.avsc"
    v1.write_text(_record({"name": "id", "type": "long"}))
    out = _assert_ok(
        cli(gateway, "schemas", "register", "--subject", subject, "--schema-file", str(v1))
    )
    assert out.startswith(f"Registered {subject} version 1: id ")
    schema_id = int(out.rsplit(" ", 1)[1].rstrip(".\n"))

    listed = _assert_ok(cli(gateway, "schemas", "list", "--subject-prefix", topic_name))
    assert listed.splitlines()[1].split() == [subject, "1", str(schema_id), "AVRO"]
    shown = _assert_ok(cli(gateway, "schemas", "show", "--subject", subject))
    assert shown.splitlines()[0] == f"# {subject} version 1, id {schema_id}, AVRO"
    assert json.loads("\n".join(shown.splitlines()[1:]))["name"] == "Sale"
    assert _assert_ok(cli(gateway, "schemas", "show", "--id", str(schema_id))).startswith(
        f"# id {schema_id}"
    )

    bad = tmp_path / "bad.avsc"
    bad.write_text(_record({"name": "id", "type": "string"}))
    check = cli(
        gateway, "schemas", "compatibility", "--subject", subject, "--schema-file", str(bad)
    )
    assert check.returncode == 1 and "TYPE_MISMATCH" in check.stdout
    good = tmp_path / "good.avsc"
    good.write_text(
        _record({"name": "id", "type": "long"}, {"name": "n", "type": "int", "default": 0})
    )
    assert "Compatible" in _assert_ok(
        cli(gateway, "schemas", "compatibility", "--subject", subject, "--schema-file", str(good))
    )
    _assert_one_line_error(
        cli(gateway, "schemas", "register", "--subject", subject, "--schema-file", str(bad)),
        "incompatible",
        "error 409",
    )

    set_level = cli(gateway, "schemas", "config", "--subject", subject, "--compatibility", "NONE")
    assert "NONE" in _assert_ok(set_level)
    assert "NONE" in _assert_ok(cli(gateway, "schemas", "config", "--subject", subject))
    assert "version(s) 1" in _assert_ok(cli(gateway, "schemas", "delete", "--subject", subject))
    assert "Permanently" in _assert_ok(
        cli(gateway, "schemas", "delete", "--subject", subject, "--permanent")
    )
