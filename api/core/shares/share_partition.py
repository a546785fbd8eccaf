"""One share partition (KIP-932): a share group's view of one topic partition, as a value.

Records from the share-partition start offset (SPSO) on are *in flight*: each is AVAILABLE (to
be delivered, again or for the first time), ACQUIRED by one member until its lock's deadline,
ACKNOWLEDGED (accepted) or ARCHIVED (rejected, past the delivery attempt limit, or a gap in the
log: a compacted offset, a transaction marker, an aborted record). Offsets at or past the end
offset have never been acquired. The start offset moves past every leading record that is
acknowledged or archived, so the in-flight window holds only what is still to be settled.

Kafka's rules (SharePartition.java): each acquisition counts one delivery; a record released
(or whose lock expired) goes back to AVAILABLE unless it has been delivered the limit's number
of times, then it is ARCHIVED; only the member holding a record may acknowledge it, while its
lock lasts. At most `max_in_flight` records are in flight: past that, nothing new is acquired
until the start offset moves.

A value: every change returns a new SharePartition and what happened, so the owner stores the
new state first (api/core/shares) and adopts it only once stored, as Kafka's share-partition
leader rolls a transition back when its write fails. No I/O, no clock of its own.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from api.core.shares.errors import InvalidRecordState
from storage_layout.meta.share_states import ShareBatch


class RecordState(enum.IntEnum):
    """Kafka's record states, with Kafka's values (the persisted delivery states use them)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(enum.IntEnum):
    """ShareFetch/ShareAcknowledge's acknowledgement types, with Kafka's values."""

    GAP = 0  # the offset holds no record for the consumer (never delivered)
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4  # KIP-1222: keep the record, with its lock extended


class ArchiveReason(enum.StrEnum):
    """Why a delivered record was archived (dead letters carry it)."""

    REJECTED = "rejected"
    DELIVERY_LIMIT = "delivery-limit"


@dataclass(frozen=True, slots=True)
class InFlight:
    """One in-flight record's state; `member_id` and `deadline_ms` while it is acquired."""

    state: RecordState
    delivery_count: int = 0
    member_id: str | None = None
    deadline_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Acquired:
    """A record handed to a member: its offset and how many times it has been delivered."""

    offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class Archived:
    """A delivered record that will never be delivered again, and why."""

    offset: int
    delivery_count: int
    reason: ArchiveReason


@dataclass(frozen=True, slots=True)
class Limits:
    """A share group's settings for its partitions (Kafka's group configs)."""

    lock_duration_ms: int = 30_000  # group.share.record.lock.duration.ms
    delivery_attempt_limit: int = 5  # group.share.delivery.attempt.limit
    max_in_flight: int = 2_000  # group.share.partition.max.record.locks


@dataclass(frozen=True, slots=True)
class SharePartition:
    start_offset: int
    end_offset: int
    records: Mapping[int, InFlight] = field(default_factory=dict)  # offsets in [start, end)

    # ---- building ----------------------------------------------------------------------------

    @classmethod
    def starting_at(cls, offset: int) -> SharePartition:
        """A share partition that has delivered nothing: in flight from `offset` on."""
        return cls(offset, offset)

    @classmethod
    def from_batches(
        cls, start_offset: int, batches: Iterable[ShareBatch], limits: Limits
    ) -> SharePartition:
        """The state stored as `batches`: records stored as acquired lost their locks with
        the owner that held them, as if their locks expired: available again, or archived at
        the delivery attempt limit (their deliveries count)."""
        records: dict[int, InFlight] = {}
        for batch in batches:
            state = RecordState(batch.state)
            if state == RecordState.ACQUIRED:
                at_limit = batch.delivery_count >= limits.delivery_attempt_limit
                state = RecordState.ARCHIVED if at_limit else RecordState.AVAILABLE
            for offset in range(max(batch.first_offset, start_offset), batch.last_offset + 1):
                records[offset] = InFlight(state, batch.delivery_count)
        end = max(records, default=start_offset - 1) + 1
        return cls(start_offset, max(end, start_offset), records).settled()

    @staticmethod
    def archived_on_load(batches: Iterable[ShareBatch], limits: Limits) -> list[Archived]:
        """The records `from_batches` archives: stored as acquired at the delivery limit."""
        return [
            Archived(offset, batch.delivery_count, ArchiveReason.DELIVERY_LIMIT)
            for batch in batches
            if batch.state == RecordState.ACQUIRED
            and batch.delivery_count >= limits.delivery_attempt_limit
            for offset in range(batch.first_offset, batch.last_offset + 1)
        ]

    def batches(self) -> list[ShareBatch]:
        """The in-flight records as runs of one state and delivery count (offset order), as
        stored (FORMAT.md §19): acquired records as acquired, without member or deadline."""
        runs: list[ShareBatch] = []
        for offset in sorted(self.records):
            record = self.records[offset]
            last = runs[-1] if runs else None
            if (
                last is not None
                and last.last_offset == offset - 1
                and (last.state, last.delivery_count) == (record.state, record.delivery_count)
            ):
                runs[-1] = replace(last, last_offset=offset)
            else:
                runs.append(ShareBatch(offset, offset, record.state, record.delivery_count))
        return runs

    # ---- acquiring ---------------------------------------------------------------------------

    def next_fetch_offset(self) -> int:
        """Where a read for this share partition starts: its first available in-flight
        record, else its end offset."""
        available = [o for o, r in self.records.items() if r.state == RecordState.AVAILABLE]
        return min(available, default=self.end_offset)

    def acquire(
        self,
        member_id: str,
        log_offsets: Sequence[int],
        read_to: int,
        *,
        records_max: int,
        limits: Limits,
        now_ms: int,
    ) -> tuple[SharePartition, list[Acquired]]:
        """Lock up to `records_max` available records for `member_id`, in offset order:
        first those in flight, then new ones. `log_offsets` are the offsets of deliverable
        records a read of the log found from `next_fetch_offset()` to `read_to` (exclusive);
        an offset in that range without a record is a gap, archived without delivery.
        """
        records = dict(self.records)
        end = self.end_offset
        log = sorted(o for o in log_offsets if o < read_to)
        deadline = now_ms + limits.lock_duration_ms
        acquired: list[Acquired] = []
        present = set(log)
        for offset in log:
            if len(acquired) >= records_max:
                break
            if offset < end:
                record = records.get(offset)
                if record is None or record.state != RecordState.AVAILABLE:
                    continue
                count = record.delivery_count + 1
            elif offset - self.start_offset >= limits.max_in_flight:
                break
            else:
                for gap in range(end, offset):  # no record there: never delivered
                    records[gap] = InFlight(RecordState.ARCHIVED)
                count = 1
                end = offset + 1
            records[offset] = InFlight(RecordState.ACQUIRED, count, member_id, deadline)
            acquired.append(Acquired(offset, count))
        beyond = [o for o in present if o >= end]  # found, but not taken (limits reached)
        if len(acquired) < records_max and not beyond:
            # the rest of the read held no deliverable record (markers, aborted records)
            for gap in range(end, min(read_to, self.start_offset + limits.max_in_flight)):
                records[gap] = InFlight(RecordState.ARCHIVED)
                end = gap + 1
        return SharePartition(self.start_offset, end, records).settled(), acquired

    # ---- acknowledging -----------------------------------------------------------------------

    def acknowledge(
        self,
        member_id: str,
        acknowledgements: Iterable[tuple[int, AcknowledgeType]],
        *,
        limits: Limits,
        now_ms: int,
        delivery_counts: Mapping[int, int] | None = None,
    ) -> tuple[SharePartition, list[Archived]]:
        """Apply a member's acknowledgements (offset, type), all or none. `delivery_counts`
        (offset -> the delivery acknowledged) refuses an acknowledgement of an earlier delivery
        of a record the member acquired again since.

        Raises:
            InvalidRecordState: an offset is not in flight, not acquired, acquired by another
                member, its lock has expired, or it was delivered again since; or one offset
                appears twice.
        """
        records = dict(self.records)
        archived: list[Archived] = []
        seen: set[int] = set()
        for offset, kind in acknowledgements:
            if offset in seen:
                raise InvalidRecordState(f"Offset {offset} is acknowledged twice in one request.")
            seen.add(offset)
            if kind == AcknowledgeType.GAP and self._settled_gap(offset):
                continue  # never delivered (archived when it was read): nothing to do
            record = self._held(offset, member_id, now_ms)
            _check_delivery(offset, record, (delivery_counts or {}).get(offset))
            if kind == AcknowledgeType.RENEW:
                records[offset] = replace(record, deadline_ms=now_ms + limits.lock_duration_ms)
                continue
            records[offset], reason = _settled_by(record, kind, limits)
            if reason is not None:
                archived.append(Archived(offset, record.delivery_count, reason))
        return replace(self, records=records).settled(), archived

    def _settled_gap(self, offset: int) -> bool:
        record = self.records.get(offset)
        if offset < self.start_offset:
            return True
        return record is not None and record.state == RecordState.ARCHIVED

    def _held(self, offset: int, member_id: str, now_ms: int) -> InFlight:
        record = self.records.get(offset)
        if record is None or record.state != RecordState.ACQUIRED:
            state = "not in flight" if record is None else record.state.name.lower()
            raise InvalidRecordState(
                f"Offset {offset} is {state}: only an acquired record can be acknowledged."
            )
        if record.member_id != member_id:
            raise InvalidRecordState(
                f"Offset {offset} is acquired by another member, not by {member_id}."
            )
        if record.deadline_ms is not None and now_ms >= record.deadline_ms:
            raise InvalidRecordState(
                f"The lock on offset {offset} expired: it may be delivered again (fetch it)."
            )
        return record

    # ---- locks and members -------------------------------------------------------------------

    def expire_locks(self, *, limits: Limits, now_ms: int) -> tuple[SharePartition, list[Archived]]:
        """Records whose lock expired: available again, or archived at the delivery limit."""
        expired = {
            o: r
            for o, r in self.records.items()
            if r.state == RecordState.ACQUIRED
            and r.deadline_ms is not None
            and now_ms >= r.deadline_ms
        }
        return self._released(expired, limits)

    def past_limit(self, *, limits: Limits) -> tuple[SharePartition, list[Archived]]:
        """Available records already delivered `limits.delivery_attempt_limit` times (the
        group's limit was lowered since): archived, never delivered again."""
        spent = {
            o: InFlight(RecordState.ARCHIVED, r.delivery_count)
            for o, r in self.records.items()
            if r.state == RecordState.AVAILABLE
            and r.delivery_count >= limits.delivery_attempt_limit
        }
        if not spent:
            return self, []
        archived = [
            Archived(o, r.delivery_count, ArchiveReason.DELIVERY_LIMIT) for o, r in spent.items()
        ]
        return replace(self, records={**self.records, **spent}).settled(), archived

    def release_member(
        self, member_id: str, *, limits: Limits
    ) -> tuple[SharePartition, list[Archived]]:
        """A member left (or its session expired): what it held is released, as Kafka does."""
        held = {
            o: r
            for o, r in self.records.items()
            if r.state == RecordState.ACQUIRED and r.member_id == member_id
        }
        return self._released(held, limits)

    def _released(self, records: Mapping[int, InFlight], limits: Limits):
        if not records:
            return self, []
        changed = dict(self.records)
        archived = []
        for offset, record in records.items():
            changed[offset], reason = _settled_by(record, AcknowledgeType.RELEASE, limits)
            if reason is not None:
                archived.append(Archived(offset, record.delivery_count, reason))
        return replace(self, records=changed).settled(), archived

    # ---- views -------------------------------------------------------------------------------

    def settled(self) -> SharePartition:
        """The same state with the start offset moved past leading acknowledged or archived
        records (they are forgotten: below the start offset nothing is delivered again)."""
        start, records = self.start_offset, dict(self.records)
        while start < self.end_offset:
            record = records.get(start)
            if record is None or record.state not in (
                RecordState.ACKNOWLEDGED,
                RecordState.ARCHIVED,
            ):
                break
            del records[start]
            start += 1
        return SharePartition(start, max(self.end_offset, start), records)

    def moved_to(self, offset: int) -> SharePartition:
        """Everything before `offset` settled (the log's start moved past it, or an
        administrator reset the group there): in flight from `offset` on."""
        if offset <= self.start_offset:
            return self
        records = {o: r for o, r in self.records.items() if o >= offset}
        return SharePartition(offset, max(self.end_offset, offset), records)

    def counts(self, now_ms: int | None = None) -> dict[str, int]:
        """In-flight records by state (the console and /metrics show them); at `now_ms`, a
        record whose lock has expired counts as available (it is, once next touched)."""
        counts = {state.name.lower(): 0 for state in RecordState}
        for record in self.records.values():
            state = record.state
            expired = record.deadline_ms is not None and now_ms is not None
            if state == RecordState.ACQUIRED and expired and now_ms >= record.deadline_ms:
                state = RecordState.AVAILABLE
            counts[state.name.lower()] += 1
        return counts

    def held_by(self, member_id: str) -> list[int]:
        return sorted(
            o
            for o, r in self.records.items()
            if r.state == RecordState.ACQUIRED and r.member_id == member_id
        )


def _check_delivery(offset: int, record: InFlight, expected: int | None) -> None:
    if expected is not None and expected != record.delivery_count:
        raise InvalidRecordState(
            f"Offset {offset} was delivered again since delivery {expected} (now delivery "
            f"{record.delivery_count}): acknowledge the latest delivery."
        )


def _settled_by(
    record: InFlight, kind: AcknowledgeType, limits: Limits
) -> tuple[InFlight, ArchiveReason | None]:
    """An acquired record after ACCEPT, REJECT or RELEASE (a lock expiry releases too)."""
    if kind == AcknowledgeType.ACCEPT:
        return InFlight(RecordState.ACKNOWLEDGED, record.delivery_count), None
    if kind == AcknowledgeType.GAP:  # no record at the offset: nothing to send anywhere
        return InFlight(RecordState.ARCHIVED, record.delivery_count), None
    if kind == AcknowledgeType.REJECT:
        return InFlight(RecordState.ARCHIVED, record.delivery_count), ArchiveReason.REJECTED
    if record.delivery_count >= limits.delivery_attempt_limit:
        archived = InFlight(RecordState.ARCHIVED, record.delivery_count)
        return archived, ArchiveReason.DELIVERY_LIMIT
    return InFlight(RecordState.AVAILABLE, record.delivery_count), None
