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


def test_a_paused_leader_sees_itself_superseded_once_it_reads_the_table(tmp_path):
    """Node 1 leads (epoch 0) and pauses; node 2 takes the partition (epoch 1), writes, and
    hands it back to node 1 (epoch 2). Node 1's log still holds epoch 0: its catch-up shows
    it is superseded, although the table names node 1 again."""
    uri = str(tmp_path / "orders" / "0")
    DeltaPartitionLog.create(uri)
    paused, other = DeltaPartitionLog.open(uri), DeltaPartitionLog.open(uri)
    held = paused.commit_leadership(1, expected=None, hold=True)
    append(paused, 1)
    assert not paused.superseded()
    other.reload()
    taken = other.commit_leadership(2, expected=held, hold=True)
    append(other, 2)
    other.commit_leadership(1, expected=taken, hold=False)  # the hand-back
    assert not paused.superseded()  # it has not read the table since
    assert paused.catch_up()
    assert paused.leader().node_id == 1 and paused.superseded()
    assert not DeltaPartitionLog.open(uri, fenced=False).superseded()  # holds nothing
