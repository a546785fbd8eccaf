"""OAuth 2 JWTs as credentials (LAKELOG_OAUTH_JWKS): SASL OAUTHBEARER on the Kafka listener for
librdkafka and Kafka's Java clients, and the same tokens as `Authorization: Bearer` over HTTP.
Signatures are checked against the JWKS (a file, or a URL), with the issuer, audience and
expiry; expired, forged, unsigned and wrongly addressed tokens are refused with Kafka's
SASL_AUTHENTICATION_FAILED and HTTP 401, and the node serves on."""

from __future__ import annotations

import http.server
import json
import struct
import threading
import time

import httpx
import jwt
import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from cryptography.hazmat.primitives.asymmetric import rsa

from tests import apache_kafka
from tests.gateway_process import start_gateway
from tests.kafka.test_scram import SASL_AUTHENTICATION_FAILED, authenticate_frames
from tests.security.helpers import AUTH_ENV, add_acl, bearer, make_keys

pytestmark = pytest.mark.gateway

ISSUER = "https://login.example.test/"
AUDIENCE = "lakelog"
KEY_ID = "key-1"


def new_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwks_of(private_key, key_id: str) -> dict:
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(private_key.public_key()))
    return {"keys": [public | {"kid": key_id, "use": "sig", "alg": "RS256"}]}


def token(private_key, subject: str, *, key_id: str = KEY_ID, lifetime_s: int = 600, **claims):
    now = int(time.time())
    body = {"sub": subject, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + lifetime_s}
    return jwt.encode(body | claims, private_key, algorithm="RS256", headers={"kid": key_id})


@pytest.fixture(scope="module")
def signer():
    return new_key()


@pytest.fixture(scope="module")
def node(tmp_path_factory, signer):
    directory = tmp_path_factory.mktemp("oauth")
    jwks = directory / "jwks.json"
    jwks.write_text(json.dumps(jwks_of(signer, KEY_ID)))
    data_dir = directory / "data"
    tokens = make_keys(data_dir, "admin")
    env = AUTH_ENV | {
        "LAKELOG_OAUTH_JWKS": str(jwks),
        "LAKELOG_OAUTH_ISSUER": ISSUER,
        "LAKELOG_OAUTH_AUDIENCE": AUDIENCE,
    }
    gateway = start_gateway(data_dir, env=env, kafka=True)
    yield gateway, tokens["admin"]
    gateway.stop()


def oauth_config(gateway, jwt_token: str, **extra) -> dict:
    def refresh(_config):
        return jwt_token, time.time() + 600, "ignored"

    return {
        "bootstrap.servers": gateway.kafka_address,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": refresh,
        **extra,
    }


def test_oauthbearer_and_http_bearer_with_the_same_jwt(node, signer, topic_name):
    gateway, admin_token = node
    with bearer(gateway.url, admin_token) as admin:
        add_acl(admin, "User:svc-orders", "WRITE", topic_name)
        add_acl(admin, "User:svc-orders", "DESCRIBE", topic_name)
        assert admin.post(
            "/v3/clusters/lakelog/topics", json={"topic_name": topic_name, "partitions_count": 1}
        ).status_code in (200, 201)
    good = token(signer, "svc-orders")

    producer = Producer(oauth_config(gateway, good))
    errors = []
    producer.produce(topic_name, b"over oauth", on_delivery=lambda e, m: errors.append(e))
    assert producer.flush(30) == 0 and errors == [None]

    topics = httpx.get(
        f"{gateway.url}/v3/clusters/lakelog/topics", headers={"Authorization": f"Bearer {good}"}
    )
    assert topics.status_code == 200, topics.text
    assert [t["topic_name"] for t in topics.json()["data"]] == [topic_name]  # ACLs apply


@pytest.mark.parametrize(
    "case", ["expired", "wrong-issuer", "wrong-audience", "forged", "unsigned", "no-subject"]
)
def test_bad_tokens_are_refused_over_both_protocols(node, signer, case):
    gateway, _ = node
    if case == "expired":
        bad = token(signer, "svc", lifetime_s=-3600)
    elif case == "wrong-issuer":
        bad = token(signer, "svc", iss="https://elsewhere.test/")
    elif case == "wrong-audience":
        bad = token(signer, "svc", aud="another-service")
    elif case == "forged":  # the right key id, another key
        bad = token(new_key(), "svc")
    elif case == "unsigned":
        now = int(time.time())
        claims = {"sub": "svc", "iss": ISSUER, "aud": AUDIENCE, "exp": now + 600}
        bad = jwt.encode(claims, None, algorithm="none", headers={"kid": KEY_ID})
    else:
        bad = token(signer, "", sub="")

    answer = httpx.get(
        f"{gateway.url}/v3/clusters/lakelog/topics", headers={"Authorization": f"Bearer {bad}"}
    )
    assert answer.status_code == 401 and answer.json()["error_code"] == 40101

    initial_response = f"n,,\x01auth=Bearer {bad}\x01\x01".encode()
    answers = authenticate_frames(gateway.kafka_address, "OAUTHBEARER", [initial_response])
    (code,) = struct.unpack_from(">h", answers[-1], 5)  # after the correlation id and tags
    assert code == SASL_AUTHENTICATION_FAILED
    with pytest.raises(KafkaException):
        AdminClient(oauth_config(gateway, bad)).list_topics(timeout=3)

    good = AdminClient(oauth_config(gateway, token(signer, "svc")))
    assert good.list_topics(timeout=15).brokers  # the node serves on


def test_java_client_with_a_token_file(node, signer, tmp_path):
    gateway, admin_token = node
    token_file = tmp_path / "token.jwt"
    token_file.write_text(token(signer, "svc-java"))
    properties = tmp_path / "oauth.properties"
    properties.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=OAUTHBEARER\n"
        "sasl.login.callback.handler.class="
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler\n"
        f"sasl.oauthbearer.token.endpoint.url={token_file.as_uri()}\n"
        "sasl.jaas.config="
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;\n"
    )
    name = "java-oauth-topic"
    with bearer(gateway.url, admin_token) as admin:
        add_acl(admin, "User:svc-java", "CREATE", name)
        add_acl(admin, "User:svc-java", "DESCRIBE", name)
    created = apache_kafka.tool(
        "kafka-topics", "--bootstrap-server", gateway.kafka_address,
        "--command-config", str(properties), "--create", "--topic", name,
        java_options=(f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={token_file.as_uri()}",),
    )  # fmt: skip
    assert created.returncode == 0, created.stderr[-3000:]
    assert created.stdout.strip() == f"Created topic {name}."


def test_jwks_from_a_url_with_a_rotated_key(tmp_path):
    """An http(s) JWKS is fetched and cached; a token signed by a key added later (a new key
    id) makes the node fetch it again."""
    first, second = new_key(), new_key()
    keys = {"keys": jwks_of(first, "k1")["keys"]}

    class Jwks(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps(keys).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    data_dir = tmp_path / "data"
    make_keys(data_dir, "admin")
    url = f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
    env = AUTH_ENV | {
        "LAKELOG_OAUTH_JWKS": url,
        "LAKELOG_OAUTH_AUDIENCE": AUDIENCE,
        "LAKELOG_OAUTH_JWKS_REFRESH_MS": "0",
    }
    gateway = start_gateway(data_dir, env=env)
    try:
        root = f"{gateway.url}/v3/clusters/lakelog/topics"
        with_first = {"Authorization": f"Bearer {token(first, 'svc', key_id='k1')}"}
        assert httpx.get(root, headers=with_first).status_code == 200
        keys["keys"] = keys["keys"] + jwks_of(second, "k2")["keys"]
        with_second = {"Authorization": f"Bearer {token(second, 'svc', key_id='k2')}"}
        assert httpx.get(root, headers=with_second).status_code == 200
    finally:
        gateway.stop()
        server.shutdown()
