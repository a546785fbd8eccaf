"""Per-group configs: Kafka's GROUP config resource (`kafka-configs --entity-type groups`),
with Kafka 4.4's names, defaults and bounds (GroupConfig, ShareGroupConfig), kept in
`_meta/group_configs` so that every node applies the same settings.

The share group settings and the dead letter topic apply; the consumer and streams group
settings are accepted at Kafka's defaults only (as unapplied topic configs are): lakelog's
consumer groups take their timeouts from the members' requests.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace

from api.core.shares.share_partition import Limits
from storage_layout.errors import ConfigNotApplied, InvalidConfig
from storage_layout.meta.group_configs import GroupConfigStore
from storage_layout.records import Isolation

Blocking = Callable[..., Awaitable]
REFRESH_INTERVAL_MS = 1_000  # how stale another node's change may be when a group reads it

# ISO-8601 durations as Java's Duration.parse reads them (days and time parts, no sign).
_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d{1,9})?)S)?)?",
    re.IGNORECASE,
)
BY_DURATION = "by_duration:"


@dataclass(frozen=True, slots=True)
class Definition:
    """One group config: its type (int, bool or str), Kafka's default and what it accepts."""

    name: str
    kind: type
    default: str
    low: int | None = None
    high: int | None = None
    choices: tuple[str, ...] = ()
    applied: bool = True

    def check(self, raw: str) -> str:
        """The value normalized, as stored.

        Raises:
            InvalidConfig: not of the config's type or outside its bounds.
            ConfigNotApplied: a config lakelog does not apply set to other than its default.
        """
        value = _typed(self, raw.strip())
        if not self.applied and value != self.default:
            raise ConfigNotApplied(
                f"Group config '{self.name}' is not applied by lakelog; only Kafka's default "
                f"'{self.default}' is accepted, not '{raw}'."
            )
        return value


def _int(name: str, default: int, low: int, high: int | None = None, **kw) -> Definition:
    return Definition(name, int, str(default), low, high, **kw)


DEFINITIONS: dict[str, Definition] = {
    d.name: d
    for d in (
        _int("share.session.timeout.ms", 45_000, 45_000, 60_000),
        _int("share.heartbeat.interval.ms", 5_000, 5_000, 15_000),
        _int("share.record.lock.duration.ms", 30_000, 15_000, 60_000),
        _int("share.delivery.count.limit", 5, 2, 10),
        _int("share.partition.max.record.locks", 2_000, 100, 4_000),
        Definition("share.auto.offset.reset", str, "latest", choices=("latest", "earliest")),
        Definition(
            "share.isolation.level",
            str,
            "read_uncommitted",
            choices=("read_uncommitted", "read_committed"),
        ),
        Definition("share.renew.acknowledge.enable", bool, "true"),
        _int("share.assignment.interval.ms", 1_000, 0, applied=False),
        Definition("share.assignor.offload.enable", bool, "true", applied=False),
        Definition("errors.deadletterqueue.topic.name", str, ""),
        Definition("errors.deadletterqueue.copy.record.enable", bool, "false"),
        _int("consumer.session.timeout.ms", 45_000, 1, applied=False),
        _int("consumer.heartbeat.interval.ms", 5_000, 1, applied=False),
        _int("consumer.assignment.interval.ms", 1_000, 0, applied=False),
        Definition("consumer.assignor.offload.enable", bool, "true", applied=False),
        _int("streams.session.timeout.ms", 45_000, 1, applied=False),
        _int("streams.heartbeat.interval.ms", 5_000, 1, applied=False),
        _int("streams.num.standby.replicas", 0, 0, applied=False),
        _int("streams.initial.rebalance.delay.ms", 3_000, 0, applied=False),
    )
}


SHARE_NAMES = frozenset(
    name for name in DEFINITIONS if name.startswith(("share.", "errors.deadletterqueue."))
)


def _typed(definition: Definition, raw: str) -> str:
    name = definition.name
    if definition.kind is bool:
        if raw.lower() not in ("true", "false"):
            raise InvalidConfig(f"Group config '{name}' is true or false, not '{raw}'.")
        return raw.lower()
    if definition.kind is int:
        return _bounded_int(definition, raw)
    if name == "share.auto.offset.reset":
        return _offset_reset(raw)
    if definition.choices and raw.lower() not in definition.choices:
        choices = ", ".join(definition.choices)
        raise InvalidConfig(f"Group config '{name}' is one of {choices}, not '{raw}'.")
    return raw.lower() if definition.choices else raw


def _bounded_int(definition: Definition, raw: str) -> str:
    name, low, high = definition.name, definition.low, definition.high
    try:
        value = int(raw)
    except ValueError:
        raise InvalidConfig(f"Group config '{name}' is a whole number, not '{raw}'.") from None
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"at least {low}" if high is None else f"between {low} and {high}"
        raise InvalidConfig(f"Group config '{name}' must be {bounds}, not {value}.")
    return str(value)


def _offset_reset(raw: str) -> str:
    lowered = raw.lower()
    if lowered in ("latest", "earliest"):
        return lowered
    if lowered.startswith(BY_DURATION) and duration_ms(raw[len(BY_DURATION) :]) is not None:
        return BY_DURATION + raw[len(BY_DURATION) :].upper()
    raise InvalidConfig(
        f"Group config 'share.auto.offset.reset' is latest, earliest or "
        f"by_duration:<ISO-8601 duration, PnDTnHnMn.nS>, not '{raw}'."
    )


def duration_ms(text: str) -> int | None:
    """An ISO-8601 duration (PnDTnHnMn.nS, not negative) in ms; None if it is not one."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or not any(match.groupdict().values()) or text.upper().endswith("T"):
        return None
    parts = {k: float(v) if v else 0.0 for k, v in match.groupdict().items()}
    seconds = parts["d"] * 86_400 + parts["h"] * 3_600 + parts["m"] * 60 + parts["s"]
    return int(seconds * 1000)


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """A group config as DescribeConfigs shows it: `is_default` unless the group sets it."""

    name: str
    value: str
    is_default: bool


@dataclass(frozen=True, slots=True)
class ShareSettings:
    """What a share group's partitions and members follow."""

    limits: Limits
    auto_offset_reset: str  # latest, earliest or by_duration:<duration>
    isolation: Isolation
    dead_letter_topic: str | None
    copy_record: bool  # the dead letter holds the record's key and value (else headers only)
    renew_enabled: bool
    session_timeout_ms: int
    heartbeat_interval_ms: int

    @classmethod
    def of(cls, values: Mapping[str, str]) -> ShareSettings:
        def get(name: str) -> str:
            return values.get(name, DEFINITIONS[name].default)

        limits = Limits(
            lock_duration_ms=int(get("share.record.lock.duration.ms")),
            delivery_attempt_limit=int(get("share.delivery.count.limit")),
            max_in_flight=int(get("share.partition.max.record.locks")),
        )
        committed = get("share.isolation.level") == "read_committed"
        return cls(
            limits=limits,
            auto_offset_reset=get("share.auto.offset.reset"),
            isolation=Isolation.COMMITTED_DATA if committed else Isolation.PLAIN,
            dead_letter_topic=get("errors.deadletterqueue.topic.name") or None,
            copy_record=get("errors.deadletterqueue.copy.record.enable") == "true",
            renew_enabled=get("share.renew.acknowledge.enable") == "true",
            session_timeout_ms=int(get("share.session.timeout.ms")),
            heartbeat_interval_ms=int(get("share.heartbeat.interval.ms")),
        )


LOCK_DURATION = "share.record.lock.duration.ms"


def normalized(
    changes: Mapping[str, str | None], bounds: Mapping[str, tuple[int, int]] | None = None
) -> dict[str, str | None]:
    """`changes` checked (None: back to the default); `bounds` replace the range of the
    configs it names (the node's group.share.min/max.record.lock.duration.ms).

    Raises:
        InvalidConfig: an unknown name, or a value its config does not accept.
    """
    unknown = sorted(name for name in changes if name not in DEFINITIONS)
    if unknown:
        raise InvalidConfig(f"{', '.join(unknown)}: not a group config (see Kafka's GroupConfig).")
    definitions = dict(DEFINITIONS)
    for name, (low, high) in (bounds or {}).items():
        definitions[name] = replace(definitions[name], low=low, high=high)
    return {
        name: None if raw is None else definitions[name].check(str(raw))
        for name, raw in changes.items()
    }


class GroupConfigs:
    """Every group's configs, as this node last read them (at most REFRESH_INTERVAL_MS old)."""

    def __init__(
        self,
        store: GroupConfigStore,
        blocking: Blocking,
        clock_ms: Callable[[], int] | None = None,
        *,
        lock_duration_bounds_ms: tuple[int, int] = (15_000, 60_000),
    ) -> None:
        self._store = store
        self._bounds = {LOCK_DURATION: lock_duration_bounds_ms}
        self._blocking = blocking
        self._clock_ms = clock_ms or (lambda: int(time.monotonic() * 1000))
        self._refreshed_ms: int | None = None
        self._known_share_groups: set[str] = set()

    async def own(self, group_id: str) -> dict[str, str]:
        """The settings the group sets itself."""
        await self._fresh()
        return dict(self._store.all().get(group_id, {}))

    async def share_groups(self) -> list[str]:
        """The share groups recorded as existing (by any node)."""
        await self._fresh()
        return self._store.share_groups()

    async def mark_share_group(self, group_id: str, *, exists: bool = True) -> None:
        """Record that a share group exists (its first member joined, or its offsets were set)
        or that it was deleted; a group already known here is not written again."""
        if exists and group_id in self._known_share_groups:
            return
        await self._blocking(self._store.set_share_group, group_id, exists, int(time.time() * 1000))
        if exists:
            self._known_share_groups.add(group_id)
        else:
            self._known_share_groups.discard(group_id)
        self._refreshed_ms = None  # read it back at the next look

    async def configured_groups(self, *, share_only: bool = False) -> list[str]:
        """The groups that set any config of their own (`share_only`: any share group
        config: such a group is a share group, even before its first member)."""
        await self._fresh()
        return sorted(
            group
            for group, values in self._store.all().items()
            if not share_only or any(name in SHARE_NAMES for name in values)
        )

    async def describe(self, group_id: str) -> list[ConfigEntry]:
        """Every group config with its value for `group_id`."""
        own = await self.own(group_id)
        return [
            ConfigEntry(name, own.get(name, d.default), name not in own)
            for name, d in DEFINITIONS.items()
        ]

    async def share_settings(self, group_id: str) -> ShareSettings:
        return ShareSettings.of(await self.own(group_id))

    async def alter(
        self,
        group_id: str,
        decide: Callable[[Mapping[str, str]], Mapping[str, str | None]],
        *,
        validate_only: bool = False,
    ) -> dict[str, str]:
        """Apply the changes `decide` makes of the group's own settings (a value None resets
        it to the default); the settings after.

        Raises:
            InvalidConfig: an unknown name or a bad value (nothing is stored).
        """

        def merged(current: Mapping[str, str]) -> dict[str, str]:
            changes = normalized(decide(current), self._bounds)
            after = {**current, **changes}
            return {name: value for name, value in after.items() if value is not None}

        if validate_only:
            return merged(await self.own(group_id))
        after = await self._blocking(self._store.change, group_id, merged)
        self._refreshed_ms = self._clock_ms()
        return after

    async def _fresh(self) -> None:
        now_ms = self._clock_ms()
        if self._refreshed_ms is None or now_ms - self._refreshed_ms >= REFRESH_INTERVAL_MS:
            await self._blocking(self._store.refresh)
            self._refreshed_ms = now_ms
