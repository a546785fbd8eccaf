"""TLS between clients and nodes and between nodes: real gateways serving HTTPS with
certificates made by openssl for the test (a CA, and one certificate for 127.0.0.1 that the nodes
use as server and as client)."""

from __future__ import annotations

import base64
import os
import shutil
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from storage_layout.cluster.nodes import NodeRegistry
from tests.gateway_process import start_gateway

pytestmark = [
    pytest.mark.gateway,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command"),
]

TOPIC, PARTITIONS = "tls.orders", 4
BINARY_V2 = {"Content-Type": "application/vnd.kafka.binary.v2+json"}


@dataclass(frozen=True)
class Pki:
    ca_file: Path
    cert_file: Path
    key_file: Path

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "LAKELOG_TLS_CERT_FILE": str(self.cert_file),
            "LAKELOG_TLS_KEY_FILE": str(self.key_file),
            "LAKELOG_TLS_CA_FILE": str(self.ca_file),
            **extra,
        }

    def trusting(self, *, with_client_cert: bool) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if with_client_cert:
            context.load_cert_chain(str(self.cert_file), str(self.key_file))
        return context


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    _openssl(directory, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
             "-out", "ca.crt", "-days", "2", "-subj", "/CN=lakelog-test-ca")  # fmt: skip
    _openssl(directory, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "node.key",
             "-out", "node.csr", "-subj", "/CN=127.0.0.1")  # fmt: skip
    (directory / "ext.cnf").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"
    )
    _openssl(directory, "x509", "-req", "-in", "node.csr", "-CA", "ca.crt", "-CAkey",
             "ca.key", "-CAcreateserial", "-out", "node.crt", "-days", "2",
             "-extfile", "ext.cnf")  # fmt: skip
    return Pki(directory / "ca.crt", directory / "node.crt", directory / "node.key")


def _produce(client: httpx.Client, partition: int, value: bytes) -> None:
    body = {"records": [{"value": base64.b64encode(value).decode()}]}
    answer = client.post(f"/topics/{TOPIC}/partitions/{partition}", json=body, headers=BINARY_V2)
    assert answer.status_code == 200 and answer.json()["offsets"][0]["error_code"] is None, (
        answer.text
    )


def test_two_nodes_forward_and_proxy_over_tls(pki, tmp_path):
    """Appends forwarded to the other node's partitions and reads proxied to their leader go
    over HTTPS, verified against the CA (a node that could not verify its peer would answer
    5xx). Nodes advertise https:// URLs."""
    data_dir = tmp_path / "data"
    env = pki.env(LAKELOG_LEASE_MS="1500", LAKELOG_HEARTBEAT_MS="150")
    verify = pki.trusting(with_client_cert=False)
    nodes = [
        start_gateway(data_dir, env={**env, "LAKELOG_NODE_ID": str(n)}, verify=verify)
        for n in (0, 1)
    ]
    try:
        time.sleep(0.5)  # both nodes see each other's liveness record
        with httpx.Client(base_url=nodes[1].url, verify=verify, timeout=30) as client:
            body = {"topic_name": TOPIC, "partitions_count": PARTITIONS}
            assert client.post("/v3/clusters/lakelog/topics", json=body).status_code == 201
            for partition in range(PARTITIONS):
                _produce(client, partition, f"v{partition}".encode())
            partitions = client.get(f"/topics/{TOPIC}/partitions").json()
            assert {p["leader"] for p in partitions} == {0, 1}  # some requests crossed nodes
            for partition in range(PARTITIONS):
                records = client.get(f"/topics/{TOPIC}/partitions/{partition}/records?offset=0")
                assert records.status_code == 200, records.text
                assert [base64.b64decode(r["value"]) for r in records.json()] == [
                    f"v{partition}".encode()
                ]
        advertised = NodeRegistry(str(data_dir)).read_all()
        assert sorted(record.url for record in advertised.values()) == sorted(n.url for n in nodes)
    finally:
        for node in nodes:
            node.stop()


def test_plain_http_and_unverified_clients_are_refused(pki, tmp_path):
    node = start_gateway(
        tmp_path / "data", env=pki.env(), verify=pki.trusting(with_client_cert=False)
    )
    try:
        plain_url = node.url.replace("https://", "http://")
        with pytest.raises(httpx.HTTPError):
            httpx.get(plain_url + "/topics", timeout=5)
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(node.url + "/topics", timeout=5)  # the system's CAs do not know ours
    finally:
        node.stop()


def test_required_client_certificates_and_the_cli(pki, tmp_path):
    """LAKELOG_TLS_CLIENT_AUTH=required: a client without a certificate signed by the CA is
    refused at the handshake; with one it is served, and so is the CLI given the same files
    in LAKELOG_TLS_*."""
    env = pki.env(LAKELOG_TLS_CLIENT_AUTH="required")
    node = start_gateway(tmp_path / "data", env=env, verify=pki.trusting(with_client_cert=True))
    try:
        with pytest.raises(httpx.HTTPError):
            anonymous = pki.trusting(with_client_cert=False)
            httpx.get(node.url + "/topics", verify=anonymous, timeout=5).raise_for_status()
        mutual = pki.trusting(with_client_cert=True)
        assert httpx.get(node.url + "/topics", verify=mutual, timeout=5).status_code == 200
        listed = _cli(["topics", "list", "--bootstrap-server", node.url], env)
        assert listed.returncode == 0, listed.stderr
        without_cert = {"LAKELOG_TLS_CA_FILE": str(pki.ca_file)}
        refused = _cli(["topics", "list", "--bootstrap-server", node.url], without_cert)
        assert refused.returncode != 0
    finally:
        node.stop()


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "api.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
