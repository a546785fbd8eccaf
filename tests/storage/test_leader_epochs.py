"""Leader epochs on a real partition table: each leadership commit records where its epoch
starts, readers and checkpoints keep them, and the answers OffsetForLeaderEpoch gives follow
Kafka's leader-epoch cache (storage_layout/leader_epochs.py)."""

from __future__ import annotations

import pytest

from storage_layout.leader_epochs import LeaderEpochs
from storage_layout.log import DeltaPartitionLog, TableReader
from storage_layout.records import AppTransaction, NewRecord
from storage_layout.topic_config import TopicConfig

CONFIG = TopicConfig()


def append(log: DeltaPartitionLog, count: int) -> None:
    log.append([NewRecord(None, b"v%d" % n) for n in range(count)], config=CONFIG)


@pytest.fixture
def led_table(tmp_path):
    """Epoch 0 (node 1) writes 3 records, epoch 1 (node 2) 2, epoch 2 (node 1) none, epoch 3
    (node 2) 1: offsets 0-2, 3-4 and 5."""
    uri = str(tmp_path / "orders" / "0")
    DeltaPartitionLog.create(uri)
    first, second = DeltaPartitionLog.open(uri), DeltaPartitionLog.open(uri)
    leader = first.commit_leadership(1, expected=None, hold=True)
    append(first, 3)
    second.reload()
    leader = second.commit_leadership(2, expected=leader, hold=True)
    append(second, 2)
    first.reload()
    leader = first.commit_leadership(1, expected=leader, hold=True)
    second.reload()
    second.commit_leadership(2, expected=leader, hold=True)
    append(second, 1)
    return uri, second


def test_each_leadership_records_where_its_epoch_starts(led_table):
    uri, log = led_table
    epochs = log.leader_epochs()
    assert epochs.entries == ((0, 0), (1, 3), (3, 5))  # epoch 2 wrote nothing
    assert [epochs.epoch_of(offset) for offset in range(6)] == [0, 0, 0, 1, 1, 3]
    assert TableReader.read(uri).leader_epochs() == epochs
    assert DeltaPartitionLog.open(uri).leader().epoch == 3


def test_end_offsets_for_epochs_are_kafkas(led_table):
    _uri, log = led_table
    epochs, end = log.leader_epochs(), log.bounds().high_watermark
    answers = {
        requested: epochs.end_offset_for(requested, current_epoch=3, log_end_offset=end)
        for requested in (-1, 0, 1, 2, 3, 4)
    }
    assert answers == {
        -1: (-1, -1),
        0: (0, 3),
        1: (1, 5),
        2: (1, 5),  # no records: the epoch before it, up to where the next one starts
        3: (3, 6),  # the current epoch: the log end
        4: (-1, -1),  # from the future
    }


def test_a_table_from_before_leader_epochs_answers_without_false_truncation():
    """No recorded starts (an older table): epochs end at the log end, records have none."""
    legacy = LeaderEpochs.from_transactions({"leader": 2 * 65536 + 1, "log": 9})
    assert legacy.epoch_of(4) == -1
    assert legacy.end_offset_for(1, current_epoch=2, log_end_offset=10) == (1, 10)
    since = LeaderEpochs.from_transactions({"leader_epoch:5": 10})
    assert since.end_offset_for(3, current_epoch=6, log_end_offset=12) == (3, 10)
    assert since.end_offset_for(5, current_epoch=6, log_end_offset=12) == (5, 12)


def test_user_transactions_cannot_take_an_epoch_app_id(led_table):
    _uri, log = led_table
    with pytest.raises(ValueError, match="reserved"):
        log.append_once(
            [NewRecord(None, b"x")], config=CONFIG, transaction=AppTransaction("leader_epoch:9", 1)
        )
