"""KIP-932's messages by hand, read back with Kafka's own schemas (kio): what a share consumer
gets for each refusal — wrong member epochs, share sessions not opened or at the wrong epoch,
acknowledgements of records not held (by anyone, by another member, twice), malformed
acknowledgement batches — each a Kafka error code, nothing changed."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from tests.conftest import create_topic
from tests.kafka.wire import raw

SHARE_GROUP_HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 78, 79
ALTER_SHARE_GROUP_OFFSETS = 91
ACCEPT = 1
SHARE = "/v3/clusters/lakelog/share-groups"

pytestmark = pytest.mark.gateway


@pytest.fixture
def queue(http, topic_name):
    create_topic(http, topic_name)
    group = f"wire-{topic_name}"
    data = [{"name": "share.auto.offset.reset", "value": "earliest"}]
    assert http.post(f"{SHARE}/{group}/configs:alter", json={"data": data}).status_code == 204
    records = [{"value": f"r{i}"} for i in range(4)]
    answer = http.post(
        f"/topics/{topic_name}",
        json={"records": records},
        headers={"Content-Type": "application/vnd.kafka.json.v2+json"},
    )
    assert answer.status_code == 200, answer.text
    return group, topic_name


def heartbeat(bootstrap: str, group: str, member: str, epoch: int, topics=None):
    body = {"group_id": group, "member_id": member, "member_epoch": epoch}
    if topics is not None:
        body["subscribed_topic_names"] = topics
    return raw(bootstrap, SHARE_GROUP_HEARTBEAT, 1, body)


def fetch(bootstrap, group, member, epoch, topic_id, acknowledgements=(), records_max=2):
    partition = {"partition_index": 0, "acknowledgement_batches": list(acknowledgements)}
    body = {
        "group_id": group,
        "member_id": member,
        "share_session_epoch": epoch,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "max_records": records_max,
        "batch_size": records_max,
        "topics": [{"topic_id": topic_id, "partitions": [partition]}],
        "forgotten_topics_data": [],
    }
    return raw(bootstrap, SHARE_FETCH, 2, body)


def acknowledge(bootstrap, group, member, epoch, topic_id, batches):
    partition = {"partition_index": 0, "acknowledgement_batches": batches}
    body = {
        "group_id": group,
        "member_id": member,
        "share_session_epoch": epoch,
        "topics": [{"topic_id": topic_id, "partitions": [partition]}],
    }
    return raw(bootstrap, SHARE_ACKNOWLEDGE, 2, body)


def batch(first: int, last: int, *types: int) -> dict:
    return {"first_offset": first, "last_offset": last, "acknowledge_types": list(types)}


def joined(bootstrap, group, topic):
    member = str(uuid.uuid4())
    answer = heartbeat(bootstrap, group, member, 0, [topic])
    assert answer.error_code == ErrorCode.none, answer.error_message
    [assigned] = answer.assignment.topic_partitions
    assert list(assigned.partitions) == [0]
    return member, answer.member_epoch, assigned.topic_id


def test_heartbeats_with_wrong_epochs_or_unknown_members_are_refused(bootstrap, queue):
    group, topic = queue
    member, epoch, _ = joined(bootstrap, group, topic)
    assert heartbeat(bootstrap, group, member, epoch).error_code == ErrorCode.none
    fenced = heartbeat(bootstrap, group, member, epoch + 3)
    assert fenced.error_code == ErrorCode.fenced_member_epoch
    unknown = heartbeat(bootstrap, group, str(uuid.uuid4()), 2)
    assert unknown.error_code == ErrorCode.unknown_member_id
    left = heartbeat(bootstrap, group, member, -1)
    assert left.error_code == ErrorCode.none and left.member_epoch == -1


def test_share_sessions_and_acknowledgements_refuse_what_is_not_held(bootstrap, queue):
    group, topic = queue
    member, _, topic_id = joined(bootstrap, group, topic)
    other, _, _ = joined(bootstrap, group, topic)

    opened = fetch(bootstrap, group, member, 0, topic_id)
    assert opened.error_code == ErrorCode.none
    [part] = opened.responses[0].partitions
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in part.acquired_records] == [
        (0, 1, 1)
    ]
    assert opened.acquisition_lock_timeout.total_seconds() == 30

    wrong_epoch = fetch(bootstrap, group, member, 5, topic_id)
    assert wrong_epoch.error_code == ErrorCode.invalid_share_session_epoch
    no_session = fetch(bootstrap, group, other, 1, topic_id)
    assert no_session.error_code == ErrorCode.share_session_not_found
    opening_with_acks = fetch(bootstrap, group, other, 0, topic_id, [batch(0, 0, ACCEPT)])
    assert opening_with_acks.error_code == ErrorCode.invalid_request
    ack_opens = acknowledge(bootstrap, group, member, 0, topic_id, [batch(0, 0, ACCEPT)])
    assert ack_opens.error_code == ErrorCode.invalid_share_session_epoch

    # the other member opens its session and acquires the next two; neither may settle the
    # first member's records, and a batch with two types for three offsets is malformed
    taken = fetch(bootstrap, group, other, 0, topic_id)
    assert [r.first_offset for r in taken.responses[0].partitions[0].acquired_records] == [2]
    stolen = acknowledge(bootstrap, group, other, 1, topic_id, [batch(0, 0, ACCEPT)])
    assert stolen.responses[0].partitions[0].error_code == ErrorCode.invalid_record_state
    malformed = acknowledge(bootstrap, group, member, 1, topic_id, [batch(0, 2, ACCEPT, ACCEPT)])
    assert malformed.responses[0].partitions[0].error_code == ErrorCode.invalid_request
    # a span no partition can have in flight, and a negative offset: refused, not walked
    huge = acknowledge(bootstrap, group, member, 2, topic_id, [batch(0, 10**12, ACCEPT)])
    assert huge.responses[0].partitions[0].error_code == ErrorCode.invalid_request
    negative = acknowledge(bootstrap, group, member, 3, topic_id, [batch(-5, 0, ACCEPT)])
    assert negative.responses[0].partitions[0].error_code == ErrorCode.invalid_request

    accepted = acknowledge(bootstrap, group, member, 4, topic_id, [batch(0, 1, ACCEPT)])
    assert accepted.responses[0].partitions[0].error_code == ErrorCode.none
    again = acknowledge(bootstrap, group, member, 5, topic_id, [batch(0, 0, ACCEPT)])
    assert again.responses[0].partitions[0].error_code == ErrorCode.invalid_record_state

    closed = fetch(bootstrap, group, other, -1, topic_id)  # gives back offsets 2 and 3
    assert closed.error_code == ErrorCode.none
    back = fetch(bootstrap, group, member, 6, topic_id)
    [delivered] = back.responses[0].partitions[0].acquired_records
    assert (delivered.first_offset, delivered.last_offset, delivered.delivery_count) == (2, 3, 2)


def test_altered_offsets_must_not_be_negative_and_are_clamped_to_the_log(bootstrap, queue, http):
    group, topic = queue
    alter = {"group_id": group, "topics": [{"topic_name": topic, "partitions": [
        {"partition_index": 0, "start_offset": -1}]}]}  # fmt: skip
    refused = raw(bootstrap, ALTER_SHARE_GROUP_OFFSETS, 0, alter)
    [partition] = refused.responses[0].partitions
    assert partition.error_code == ErrorCode.invalid_request
    alter["topics"][0]["partitions"][0]["start_offset"] = 1_000
    assert raw(bootstrap, ALTER_SHARE_GROUP_OFFSETS, 0, alter).error_code == ErrorCode.none
    [stored] = http.get(f"{SHARE}/{group}").json()["partitions"]
    assert stored["start_offset"] == 4  # the log's end: 4 records
