"""Confluent REST v2 consumer instances: consumers whose poll loop runs in the gateway.

An instance lives on its group's coordinator node (every node forwards the group's requests
there, so clients need no sticky load balancer) and is a *server-driven* member of the group:
it counts as rejoined as soon as a rebalance starts, so a group of instances rebalances at
once, and the first fetch after subscribing already has an assignment.

Beyond the REST Proxy: `records` returns as soon as any record is available (or once
fetch.min.bytes have arrived, if set), records carry timestamp and headers, fetches on one
instance are serialized by a lock (a retried long poll waits its turn, it cannot corrupt
positions), and an expired instance answers with an error that names the expiry.
`isolation.level` (Kafka's consumer setting) is taken too: read_committed instances see
committed records only, up to the last stable offset, and `latest` means that offset.

Offsets follow Confluent's v2 meaning at the API (a commit names the last consumed offset; the
next offset, offset + 1, is stored) and Kafka's in storage. Auto-commit is Kafka's: positions
are committed at a later poll (so only records already returned are covered), before a
rebalance takes partitions away, and when the instance is deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from api.core import leader_reads
from api.core.broker import Broker
from api.core.groups.coordinator import GroupCoordinator
from api.core.groups.dead_letters import (
    DeadLetterAck,
    DeadLetterReport,
    DeadLetterRequest,
    send_dead_letter,
)
from api.core.groups.errors import (
    ConsumerFormatMismatch,
    ConsumerInstanceExists,
    ConsumerInstanceNotFound,
    IllegalConsumerState,
    InvalidConsumerConfig,
    NoOffsetForPartition,
)
from api.core.groups.group import GroupState, JoinRequest, Subscription
from api.http import remote_reads
from api.http.schema_formats import SchemaFormats
from api.http.wire import BINARY, SCHEMA_FORMATS
from storage_layout.errors import OffsetOutOfRange
from storage_layout.meta.consumer_offsets import CommittedOffset, OffsetCommit
from storage_layout.records import Isolation, TopicPartition

log = logging.getLogger("lakelog.consumers")

FORMATS = ("binary", "json", *SCHEMA_FORMATS)
OFFSET_RESETS = ("earliest", "latest", "none")
AUTO_COMMIT_INTERVAL_S = 5.0  # Kafka's auto.commit.interval.ms default
EXPIRED_KEPT = 1024  # expired instance names remembered for a clear 404 message
REST_ASSIGNOR = ("range",)


@dataclass(frozen=True, slots=True)
class InstanceConfig:
    """What `POST /consumers/{group}` may set (Confluent's names in the API)."""

    name: str
    embedded: str = "binary"
    auto_offset_reset: str = "latest"
    auto_commit: bool = True
    fetch_min_bytes: int = -1
    request_timeout_ms: int = 1000
    isolation: Isolation = Isolation.PLAIN

    @classmethod
    def parse(cls, body: Mapping[str, object]) -> InstanceConfig:
        """Validate a create body (values may be strings, as Confluent clients send them).

        Raises:
            InvalidConsumerConfig: a value is not one of the allowed ones.
        """
        name = body.get("name") or body.get("id") or f"rest-consumer-{uuid.uuid4().hex[:16]}"
        embedded = str(body.get("format") or "binary").lower()
        if embedded not in FORMATS:
            raise InvalidConsumerConfig(
                f"format '{embedded}' is not supported: use binary, json, avro, jsonschema or "
                f"protobuf."
            )
        reset = str(body.get("auto.offset.reset") or "latest").lower()
        if reset not in OFFSET_RESETS:
            raise InvalidConsumerConfig(f"auto.offset.reset must be one of {OFFSET_RESETS}.")
        try:
            isolation = Isolation.for_data_readers(
                str(body.get("isolation.level") or "read_uncommitted")
            )
        except ValueError as error:
            raise InvalidConsumerConfig(str(error)) from None
        return cls(
            isolation=isolation,
            name=_valid_name(str(name)),
            embedded=embedded,
            auto_offset_reset=reset,
            auto_commit=_bool(body.get("auto.commit.enable", True), "auto.commit.enable"),
            fetch_min_bytes=_int(body.get("fetch.min.bytes", -1), "fetch.min.bytes", minimum=-1),
            request_timeout_ms=_int(
                body.get("consumer.request.timeout.ms", 1000),
                "consumer.request.timeout.ms",
                minimum=0,
            ),
        )


@dataclass(slots=True)
class ConsumerInstance:
    group_id: str
    config: InstanceConfig
    last_used_s: float
    member_id: str | None = None  # set while subscribed
    subscription: Subscription | None = None
    manual: frozenset[TopicPartition] | None = None
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    committed_positions: dict[TopicPartition, int] = field(default_factory=dict)
    last_auto_commit_s: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class ConsumerInstances:
    """This node's REST consumer instances (of the groups it coordinates)."""

    def __init__(
        self,
        broker: Broker,
        coordinator: GroupCoordinator,
        *,
        instance_timeout_ms: int,
        request_timeout_max_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._broker = broker
        self._schema_formats = SchemaFormats(broker.schemas)
        self._coordinator = coordinator
        self._timeout_ms = instance_timeout_ms
        self._request_timeout_max_ms = request_timeout_max_ms
        self._clock = clock
        self._instances: dict[tuple[str, str], ConsumerInstance] = {}
        self._expired: dict[tuple[str, str], float] = {}
        self._round = itertools.count()
        coordinator.before_rebalance = self.commit_before_rebalance

    # ---- lifecycle -------------------------------------------------------------------------

    async def create(self, group_id: str, config: InstanceConfig) -> ConsumerInstance:
        await self._coordinator.group(group_id)  # this node must coordinate the group
        key = (group_id, config.name)
        if key in self._instances:
            raise ConsumerInstanceExists(
                f"Consumer instance '{config.name}' already exists in group '{group_id}'."
            )
        self._expired.pop(key, None)
        instance = ConsumerInstance(group_id, config, self._clock())
        self._instances[key] = instance
        return instance

    async def delete(self, group_id: str, name: str) -> None:
        instance = self.get(group_id, name)
        async with instance.lock:
            await self._maybe_auto_commit(instance, force=True)
            await self._leave(instance)
            self._instances.pop((group_id, name), None)

    async def expire_idle_forever(self, interval_s: float) -> None:
        """`expire_idle` every `interval_s` until cancelled (one failed round is logged)."""
        while True:
            try:
                await self.expire_idle()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the next round tries again
                log.exception("expiring idle consumer instances failed")
            await asyncio.sleep(interval_s)

    async def expire_idle(self) -> None:
        """Remove instances idle for longer than consumer.instance.timeout.ms."""
        now = self._clock()
        for key, instance in list(self._instances.items()):
            if now - instance.last_used_s > self._timeout_ms / 1000 and not instance.lock.locked():
                self._instances.pop(key)
                self._expired[key] = now
                while len(self._expired) > EXPIRED_KEPT:
                    self._expired.pop(next(iter(self._expired)))
                with contextlib.suppress(Exception):
                    await self._leave(instance)

    def get(self, group_id: str, name: str) -> ConsumerInstance:
        instance = self._instances.get((group_id, name))
        if instance is not None:
            instance.last_used_s = self._clock()
            return instance
        if (group_id, name) in self._expired:
            raise ConsumerInstanceNotFound(
                f"Consumer instance '{name}' of group '{group_id}' expired: it made no request "
                f"for {self._timeout_ms} ms (consumer.instance.timeout.ms). Create it again."
            )
        raise ConsumerInstanceNotFound(
            f"Consumer instance '{name}' not found in group '{group_id}' (never created, "
            f"deleted, or lost when its group moved to another coordinator node, e.g. because "
            f"that node stopped or a node joined)."
        )

    # ---- subscription and assignment -----------------------------------------------------------

    async def subscribe(self, group_id: str, name: str, subscription: Subscription) -> None:
        instance = self.get(group_id, name)
        async with instance.lock:
            if instance.manual is not None:
                raise IllegalConsumerState(
                    "Illegal state: Subscription to topics, partitions and pattern are mutually "
                    "exclusive"
                )
            await self._maybe_auto_commit(instance, force=True)
            instance.subscription = subscription
            request = self._join_request(instance)
            result = await self._coordinator.join(group_id, request)
            instance.member_id = result.member_id

    async def unsubscribe(self, group_id: str, name: str) -> None:
        instance = self.get(group_id, name)
        async with instance.lock:
            await self._maybe_auto_commit(instance, force=True)
            await self._leave(instance)
            instance.subscription = None
            instance.positions.clear()

    def subscribed_topics(self, group_id: str, name: str) -> list[str]:
        instance = self.get(group_id, name)
        if instance.subscription is None:
            return []
        return sorted(instance.subscription.topics)

    async def assign(self, group_id: str, name: str, partitions: Iterable[TopicPartition]) -> None:
        instance = self.get(group_id, name)
        async with instance.lock:
            if instance.subscription is not None:
                raise IllegalConsumerState(
                    "Illegal state: Subscription to topics, partitions and pattern are mutually "
                    "exclusive"
                )
            for tp in partitions:
                (await self._broker.topics.get(tp.topic)).check_partition(tp.partition)
            instance.manual = frozenset(partitions)
            instance.positions = {
                tp: p for tp, p in instance.positions.items() if tp in instance.manual
            }

    async def assignment(self, group_id: str, name: str) -> list[TopicPartition]:
        instance = self.get(group_id, name)
        return sorted(await self._assigned(instance, wait_s=0.0))

    # ---- positions -------------------------------------------------------------------------

    async def seek(self, group_id: str, name: str, offsets: Mapping[TopicPartition, int]) -> None:
        instance = self.get(group_id, name)
        async with instance.lock:
            await self._check_assigned(instance, offsets)
            for tp, offset in offsets.items():
                if offset < 0:
                    raise InvalidConsumerConfig(f"Offset {offset} for {tp} must be >= 0.")
                instance.positions[tp] = offset

    async def seek_to(self, group_id: str, name: str, partitions, *, end: bool) -> None:
        instance = self.get(group_id, name)
        async with instance.lock:
            await self._check_assigned(instance, partitions)
            for tp in partitions:
                bounds = await leader_reads.bounds(self._broker, tp.topic, tp.partition)
                last = bounds.end_offset(instance.config.isolation)
                instance.positions[tp] = last if end else bounds.log_start_offset

    async def seek_timestamps(
        self, group_id: str, name: str, timestamps_ms: Mapping[TopicPartition, int]
    ) -> None:
        instance = self.get(group_id, name)
        async with instance.lock:
            await self._check_assigned(instance, timestamps_ms)
            for tp, timestamp_ms in timestamps_ms.items():
                offset = await leader_reads.offset_for_timestamp(
                    self._broker, tp.topic, tp.partition, timestamp_ms
                )
                if offset is None:  # no record that late: the end, as Kafka's seek would
                    bounds = await leader_reads.bounds(self._broker, tp.topic, tp.partition)
                    offset = bounds.end_offset(instance.config.isolation)
                instance.positions[tp] = offset

    # ---- records ---------------------------------------------------------------------------

    async def records(
        self, group_id: str, name: str, *, timeout_ms: int | None, bytes_max: int, embedded: str
    ) -> list[dict]:
        """Records from the assigned partitions: as soon as any are available (or
        fetch.min.bytes of them), else after the timeout an empty list."""
        instance = self.get(group_id, name)
        if embedded != instance.config.embedded:
            raise ConsumerFormatMismatch(
                f"The requested format '{embedded}' does not match the instance's format "
                f"'{instance.config.embedded}'."
            )
        wait_ms = instance.config.request_timeout_ms if timeout_ms is None else timeout_ms
        deadline_s = self._clock() + min(wait_ms, self._request_timeout_max_ms) / 1000
        async with instance.lock:
            await self._maybe_auto_commit(instance)
            partitions = await self._assigned(instance, wait_s=deadline_s - self._clock())
            for tp in partitions:
                if tp not in instance.positions:
                    instance.positions[tp] = await self._initial_position(instance, tp)
            items = await self._fetch(instance, partitions, bytes_max, deadline_s)
            instance.last_used_s = self._clock()
            return items

    # ---- offsets ---------------------------------------------------------------------------

    async def commit(
        self, group_id: str, name: str, offsets: Mapping[TopicPartition, tuple[int, str | None]]
    ) -> None:
        """Commit `offsets` (last consumed offset, metadata), or all fetched positions."""
        instance = self.get(group_id, name)
        async with instance.lock:
            if offsets:
                commits = [
                    OffsetCommit(tp.topic, tp.partition, offset + 1, metadata)
                    for tp, (offset, metadata) in offsets.items()
                ]
            else:
                commits = [
                    OffsetCommit(tp.topic, tp.partition, position)
                    for tp, position in instance.positions.items()
                ]
            await self._commit(instance, commits)

    async def dead_letter(
        self, group_id: str, name: str, report: DeadLetterReport
    ) -> DeadLetterAck:
        """Send the record at `report.offset` to the dead letter topic and commit past it
        (dead_letters.send_dead_letter); the instance's position moves past it too."""
        instance = self.get(group_id, name)
        async with instance.lock:
            tp = report.source
            await self._check_assigned(instance, [tp])
            member_id, generation = await self._committer(instance)
            request = DeadLetterRequest(group_id, member_id, generation, report)
            ack = await send_dead_letter(self._broker, request)
            instance.committed_positions[tp] = ack.committed_offset
            if instance.positions.get(tp, 0) <= report.offset:
                instance.positions[tp] = report.offset + 1
            instance.last_used_s = self._clock()
            return ack

    async def committed(
        self, group_id: str, name: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, CommittedOffset | None]:
        self.get(group_id, name)
        stored = await self._coordinator.committed(group_id)
        return {tp: stored.get(tp) for tp in partitions}

    async def commit_before_rebalance(self, group_id: str) -> None:
        """Auto-commit every subscribed instance of the group before partitions move."""
        for (group, _), instance in list(self._instances.items()):
            if group == group_id and instance.member_id and instance.config.auto_commit:
                with contextlib.suppress(Exception):
                    await self._maybe_auto_commit(instance, force=True)

    # ---- internals -------------------------------------------------------------------------

    def _join_request(self, instance: ConsumerInstance) -> JoinRequest:
        return JoinRequest(
            member_id=instance.member_id,
            client_id=f"rest-{instance.config.name}",
            group_instance_id=None,
            session_timeout_ms=min(self._timeout_ms, 1_800_000),
            rebalance_timeout_ms=0,
            subscription=instance.subscription,
            assignors=REST_ASSIGNOR,
            server_driven=True,
        )

    async def _assigned(self, instance: ConsumerInstance, *, wait_s: float):
        """The instance's partitions now; a rebalance in progress is waited for (bounded)."""
        if instance.manual is not None:
            return instance.manual
        if instance.subscription is None:
            return frozenset()
        group = await self._coordinator.group(instance.group_id)
        member = group.members.get(instance.member_id or "")
        if member is None:  # expired or the group moved: join again (as Kafka's poll does)
            result = await self._coordinator.join(instance.group_id, self._join_request(instance))
            instance.member_id = result.member_id
            group = await self._coordinator.group(instance.group_id)
            member = group.members[instance.member_id]
        member.last_seen_s = self._clock()
        deadline_s = self._clock() + max(0.0, wait_s)
        await self._coordinator.complete_if_ready(instance.group_id)
        while group.state == GroupState.PREPARING_REBALANCE and self._clock() < deadline_s:
            await self._coordinator.complete_if_ready(instance.group_id)
            if group.state == GroupState.PREPARING_REBALANCE:
                await self._coordinator.wait_for_change(
                    instance.group_id, deadline_s - self._clock()
                )
        if group.state == GroupState.PREPARING_REBALANCE:
            return frozenset()
        assignment = group.members[instance.member_id].assignment
        for tp in [tp for tp in instance.positions if tp not in assignment]:
            del instance.positions[tp]  # revoked
        return assignment

    async def _check_assigned(self, instance: ConsumerInstance, partitions) -> None:
        assigned = await self._assigned(instance, wait_s=0.0)
        missing = [tp for tp in partitions if tp not in assigned]
        if missing:
            raise IllegalConsumerState(
                f"Illegal state: No current assignment for partition "
                f"{missing[0].topic}-{missing[0].partition}"
            )

    async def _initial_position(self, instance: ConsumerInstance, tp: TopicPartition) -> int:
        """The committed offset, or auto.offset.reset; a committed offset outside the log is
        reset as Kafka does (below log_start: the reset policy decides)."""
        committed = (await self._coordinator.committed(instance.group_id)).get(tp)
        bounds = await leader_reads.bounds(self._broker, tp.topic, tp.partition)
        if committed is not None and (
            bounds.log_start_offset <= committed.offset <= bounds.high_watermark
        ):
            return committed.offset
        end = bounds.end_offset(instance.config.isolation)
        return self._reset(instance, tp, bounds.log_start_offset, end)

    def _reset(self, instance: ConsumerInstance, tp: TopicPartition, start: int, end: int) -> int:
        policy = instance.config.auto_offset_reset
        if policy == "earliest":
            return start
        if policy == "latest":
            return end
        raise NoOffsetForPartition(
            f"No valid committed offset for {tp.topic}-{tp.partition} in group "
            f"'{instance.group_id}' and auto.offset.reset=none: seek first."
        )

    async def _fetch(self, instance, partitions, bytes_max: int, deadline_s: float) -> list[dict]:
        """One pass over the partitions without waiting; then, if nothing came (or less than
        fetch.min.bytes), long-poll them all until any has data or the deadline passes."""
        ordered = sorted(partitions)
        if not ordered:
            await asyncio.sleep(max(0.0, deadline_s - self._clock()))
            return []
        start = next(self._round) % len(ordered)  # fair start: no partition starves the rest
        ordered = ordered[start:] + ordered[:start]
        items = await self._fetch_pass(instance, ordered, bytes_max, timeout_ms=0)
        while not self._enough(instance, items) and self._clock() < deadline_s:
            remaining_ms = max(1, int((deadline_s - self._clock()) * 1000))
            budget = bytes_max - _size(items)
            more = await self._long_poll(instance, ordered, budget, remaining_ms)
            if not more:
                break  # the long poll timed out
            items += more
        return items

    @staticmethod
    def _enough(instance: ConsumerInstance, items: list[dict]) -> bool:
        """Any record (the default), or fetch.min.bytes of keys and values when it is set."""
        if instance.config.fetch_min_bytes <= 0:
            return bool(items)
        return _size(items) >= instance.config.fetch_min_bytes

    async def _fetch_pass(self, instance, ordered, bytes_max: int, *, timeout_ms: int) -> list:
        items: list[dict] = []
        for tp in ordered:
            budget = bytes_max - _size(items)
            if budget <= 0:
                break
            items += await self._fetch_partition(instance, tp, budget, timeout_ms)
        return items

    async def _long_poll(self, instance, ordered, bytes_max: int, timeout_ms: int) -> list:
        tasks = [
            asyncio.ensure_future(self._fetch_partition(instance, tp, bytes_max, timeout_ms))
            for tp in ordered
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            first = next(t for t in tasks if t in done)
            return first.result()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _fetch_partition(self, instance, tp: TopicPartition, bytes_max, timeout_ms):
        """Fetch from the instance's position and advance it past what the read passed
        (records, and the markers and aborted records it left out)."""
        position = instance.positions[tp]
        embedded = instance.config.embedded
        schema_format = embedded in SCHEMA_FORMATS  # fetched binary, decoded here
        try:
            fetched = await remote_reads.fetch_items(
                self._broker,
                tp.topic,
                tp.partition,
                offset=position,
                bytes_max=bytes_max,
                timeout_ms=timeout_ms,
                embedded=BINARY if schema_format else embedded,
                isolation=instance.config.isolation,
            )
        except OffsetOutOfRange as error:
            start, end = error.log_start_offset, error.high_watermark
            if instance.config.isolation.needs_index:  # latest: the last stable offset
                bounds = await leader_reads.bounds(self._broker, tp.topic, tp.partition)
                end = bounds.end_offset(instance.config.isolation)
            instance.positions[tp] = self._reset(instance, tp, start, end)
            return []
        if fetched.next_offset is None or instance.positions.get(tp) != position:
            return []  # nothing read, or a seek moved the position meanwhile
        items = fetched.items
        if schema_format:
            items = await self._schema_formats.decode_items(items, embedded)
        # Past the last row read, records left out included (markers, aborted records).
        instance.positions[tp] = fetched.next_offset
        return items

    async def _maybe_auto_commit(self, instance: ConsumerInstance, *, force: bool = False) -> None:
        if not instance.config.auto_commit or not instance.positions:
            return
        due = self._clock() - instance.last_auto_commit_s >= AUTO_COMMIT_INTERVAL_S
        if not (force or due):
            return
        changed = {
            tp: p
            for tp, p in instance.positions.items()
            if instance.committed_positions.get(tp) != p
        }
        if changed:
            commits = [OffsetCommit(tp.topic, tp.partition, p) for tp, p in changed.items()]
            await self._commit(instance, commits)
        instance.last_auto_commit_s = self._clock()

    async def _commit(self, instance: ConsumerInstance, commits: list[OffsetCommit]) -> None:
        if not commits:
            return
        member_id, generation = await self._committer(instance)
        await self._coordinator.commit(
            instance.group_id, commits, member_id=member_id, generation=generation
        )
        for commit in commits:
            tp = TopicPartition(commit.topic, commit.partition)
            instance.committed_positions[tp] = commit.offset

    async def _committer(self, instance: ConsumerInstance) -> tuple[str | None, int]:
        """(member id, generation) the instance commits with. A subscribed instance commits in
        its generation; a manually assigned one (Kafka's simple consumer) outside any, which
        the coordinator allows only in an empty group."""
        group = await self._coordinator.group(instance.group_id)
        member_id = instance.member_id if instance.member_id in group.members else None
        return member_id, group.generation if member_id else -1

    async def _leave(self, instance: ConsumerInstance) -> None:
        if instance.member_id is None:
            return
        member_id, instance.member_id = instance.member_id, None
        with contextlib.suppress(Exception):
            await self._coordinator.leave(instance.group_id, member_id)


def _size(items: list[dict]) -> int:
    return sum(len(item.get("key") or "") + len(str(item.get("value") or "")) for item in items)


def _valid_name(name: str) -> str:
    if not name or len(name) > 255 or "/" in name:
        raise InvalidConsumerConfig(
            f"Consumer instance name '{name}' must be 1..255 characters without '/'."
        )
    return name


def _bool(value: object, field_name: str) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "false"):
        return str(value).lower() == "true"
    raise InvalidConsumerConfig(f"{field_name} must be true or false, not {value!r}.")


def _int(value: object, field_name: str, *, minimum: int) -> int:
    try:
        number = int(str(value))
    except ValueError:
        raise InvalidConsumerConfig(f"{field_name} must be an integer, not {value!r}.") from None
    if number < minimum:
        raise InvalidConsumerConfig(f"{field_name} must be >= {minimum}, not {number}.")
    return number
