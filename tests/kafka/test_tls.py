"""The Kafka listener over TLS with the gateway's LAKELOG_TLS_* settings (Kafka's SSL
security protocol): a client that trusts the CA produces and consumes; one that speaks
plaintext to it gets nothing."""

from __future__ import annotations

import shutil

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.gateway_process import start_gateway
from tests.kafka.test_clients import consume, produce_all
from tests.security.test_tls import pki  # noqa: F401 (the module's CA and node certificate)

pytestmark = [
    pytest.mark.gateway,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command"),
]


def test_kafka_clients_over_tls(pki, tmp_path):  # noqa: F811
    gateway = start_gateway(
        tmp_path / "data", env=pki.env(), verify=pki.trusting(with_client_cert=False), kafka=True
    )
    try:
        tls = {
            "bootstrap.servers": gateway.kafka_address,
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca_file),
        }
        admin = AdminClient(tls)
        admin.create_topics([NewTopic("tls.events", 1, 1)])["tls.events"].result(30)
        acked = produce_all(gateway.kafka_address, "tls.events", [{"value": b"sealed"}], **tls)
        read = consume(gateway.kafka_address, "tls.events", [0], 1, **tls)
        assert [m.value() for m in read] == [b"sealed"] and len(acked) == 1

        errors = []
        plaintext = Producer(
            {"bootstrap.servers": gateway.kafka_address, "error_cb": errors.append}
        )
        for _ in range(40):
            plaintext.poll(0.25)
            if errors:
                break
        assert errors  # the TLS listener does not speak plaintext Kafka
    finally:
        gateway.stop()
