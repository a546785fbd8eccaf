"""`lakelog serve` refuses a storage root it cannot use, before serving anything, with one line
that names the resource or variable to fix (exit code 2, as for bad arguments)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.gateway_process import free_port

pytestmark = pytest.mark.gateway


def serve(root: str, env: dict[str, str], without: tuple[str, ...] = ()):
    """Run `lakelog serve` (with `env`, and none of `without`); it must exit, not serve."""
    command = [sys.executable, "-m", "api.cli", "serve", "--data-dir", root]
    command += ["--port", str(free_port())]
    full_env = {k: v for k, v in {**os.environ, **env}.items() if k not in without}
    return subprocess.run(command, env=full_env, capture_output=True, text=True, timeout=120)


def test_a_missing_bucket_is_named(s3_server):
    result = serve("s3://no-such-bucket/lakelog", s3_server.env)
    assert result.returncode == 2, result.stderr
    assert "no-such-bucket" in result.stderr
    assert "does not exist" in result.stderr


def test_an_unreachable_endpoint_names_the_variables(s3_server):
    env = {**s3_server.env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}
    result = serve("s3://lake/lakelog", env)
    assert result.returncode == 2, result.stderr
    assert "AWS_ENDPOINT_URL" in result.stderr


def test_a_plain_http_endpoint_without_allow_http_says_so(s3_server):
    root = f"s3://{s3_server.create_bucket()}/lakelog"
    result = serve(root, s3_server.env, without=("AWS_ALLOW_HTTP",))
    assert result.returncode == 2, result.stderr
    assert "AWS_ALLOW_HTTP" in result.stderr


def test_an_unknown_scheme_is_refused():
    result = serve("hdfs://namenode/lakelog", {})
    assert result.returncode == 2, result.stderr
    assert "s3://" in result.stderr


def test_a_bad_local_commit_option_is_refused(tmp_path):
    options = '{"lakelog.local_commit": "rename"}'
    result = serve(str(tmp_path), {"LAKELOG_STORAGE_OPTIONS": options})
    assert result.returncode == 2, result.stderr
    assert "lakelog.local_commit" in result.stderr


def test_missing_credentials_name_the_variables(s3_server):
    root = f"s3://{s3_server.create_bucket()}/lakelog"
    result = serve(root, s3_server.env, without=("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
    assert result.returncode == 2, result.stderr
    assert "no credentials" in result.stderr
    assert "AWS_ACCESS_KEY_ID" in result.stderr
