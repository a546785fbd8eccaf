"""SQ (chaos/shares.py): a share group consumed by Kafka 4.2's Java share consumers and by HTTP
queue consumers while gateways are killed (-9) and paused; the checker finds no record accepted
twice, none lost, no delivery count repeated or past the limit, and does find each of those in
doctored copies of the run's log.

Long version: `python -m chaos run SQ --seed S --ops 2000 --duration-s 600` (RELIABILITY.md)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from chaos.shares import DELIVERY_LIMIT, QueueLog, check_queue, run_sq

pytestmark = pytest.mark.gateway


@pytest.fixture(scope="module")
def sq_run(tmp_path_factory):
    return run_sq(
        seed=3,
        ops=300,
        duration_s=90,
        input_per_s=30,
        fault_every_s=(2.0, 5.0),
        faults_min=2,
        workdir=tmp_path_factory.mktemp("sq"),
    )


def test_share_consumers_over_kafka_and_http_lose_and_repeat_nothing(sq_run):
    assert sq_run.passed, sq_run.text()
    assert sq_run.faults["kill"] >= 1 and sq_run.faults["pause"] >= 1, sq_run.text()
    assert len(sq_run.log.inputs) == 300, sq_run.text()
    assert sq_run.log.by_client["java"] > 0 and sq_run.log.by_client["http"] > 0, sq_run.text()
    assert len(sq_run.log.dead_letters) >= 30, sq_run.text()  # every value ending in 7


def copied(log: QueueLog) -> QueueLog:
    return QueueLog(
        inputs=dict(log.inputs),
        deliveries=defaultdict(list, {k: list(v) for k, v in log.deliveries.items()}),
        acknowledgements=defaultdict(list, {k: list(v) for k, v in log.acknowledgements.items()}),
        dead_letters=dict(log.dead_letters),
    )


def test_the_checker_finds_each_anomaly_in_doctored_logs(sq_run):
    log = sq_run.log
    assert check_queue(log).valid
    key, seen = next((k, s) for k, s in log.deliveries.items() if k not in log.dead_letters)

    twice = copied(log)
    twice.acknowledgements[key] += [("accept", "ok"), ("accept", "ok")]
    assert key in check_queue(twice).accepted_twice

    lost = copied(log)
    lost.acknowledgements[key] = [("accept", "failed")]
    assert seen[0][1] in check_queue(lost).lost

    repeated = copied(log)
    repeated.deliveries[key] = [*seen, seen[0]]
    assert key in check_queue(repeated).repeated_counts

    past = copied(log)
    past.deliveries[key] = [*seen, (DELIVERY_LIMIT + 1, seen[0][1])]
    assert key in check_queue(past).past_limit
