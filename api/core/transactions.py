"""Kafka's transaction coordinator (KIP-98, the first transaction protocol) on lakelog's store.

Each transactional id has one coordinator node (rendezvous hashing over the live nodes, as
groups) and its state in `_meta/transactions` (storage_layout/meta/transaction_state.py: every
change is the put-if-absent of the next state, so a deposed coordinator cannot act on a
stale one). A transaction ends in two steps, both recorded before anything depends on them:
PrepareCommit (or PrepareAbort) is stored, then markers go to every partition the transaction
wrote to and, on commit, its offsets to the consumer groups; then CompleteCommit is stored. A
coordinator that dies in between leaves the Prepare state, which its successor (or its own
restart) completes: markers and offset commits may be written twice, which changes nothing.
Abandoned transactions are aborted after their timeout, as Kafka does.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from api.core.cluster import preferred_node
from api.core.errors import (
    ConcurrentTransactions,
    InvalidProducerIdMapping,
    InvalidTransactionTimeout,
    InvalidTxnState,
    TransactionalIdNotFound,
    TransactionCoordinatorUnavailable,
)
from api.core.internal_topics import TRANSACTION_SLOTS, TRANSACTION_TOPIC
from api.core.writer import TransactionMarker
from storage_layout.errors import ProducerFenced
from storage_layout.meta.consumer_offsets import OffsetCommit
from storage_layout.meta.producers import ProducerIdentity
from storage_layout.meta.transaction_state import (
    PendingOffset,
    StateTaken,
    TransactionStateStore,
    TxnState,
    TxnStatus,
)
from storage_layout.partitioner import murmur2, to_positive
from storage_layout.schema import CONTROL_ABORT, CONTROL_COMMIT

TIMEOUT_MS_MAX = 900_000  # Kafka's transaction.max.timeout.ms
SWEEP_S = 1.0  # how often expired and half-completed transactions are looked for
RESCAN_S = 10.0  # how often the store is listed for transactional ids coordinated here

log = logging.getLogger("lakelog.transactions")

MarkerWriter = Callable[[str, int, TransactionMarker], Awaitable[None]]
# (group id, the offsets to commit (none: the transaction aborted), producer id)
OffsetCommitter = Callable[[str, list[OffsetCommit], int], Awaitable[None]]


def transaction_slot(transactional_id: str) -> int:
    return to_positive(murmur2(transactional_id.encode())) % TRANSACTION_SLOTS


class TransactionCoordinator:
    """The transactional ids this node coordinates."""

    def __init__(
        self,
        *,
        store: TransactionStateStore,
        node_id: int,
        live_nodes: Callable[[], list[int]],
        init_producer: Callable[[str], Awaitable[ProducerIdentity]],
        write_marker: MarkerWriter,
        commit_offsets: OffsetCommitter,
        blocking: Callable,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._store = store
        self.node_id = node_id
        self._live_nodes = live_nodes
        self._init_producer = init_producer
        self._write_marker = write_marker
        self._commit_offsets = commit_offsets
        self._blocking = blocking
        self._clock_ms = clock_ms
        self._states: dict[str, TxnState] = {}  # the newest state of each id coordinated here
        self._locks: dict[str, asyncio.Lock] = {}
        self._sweeper: asyncio.Task | None = None

    def start(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper

    def coordinator_of(self, transactional_id: str) -> int | None:
        return preferred_node(
            self._live_nodes(), TRANSACTION_TOPIC, transaction_slot(transactional_id)
        )

    # ---- the producer's requests ---------------------------------------------------------

    async def init_producer(self, transactional_id: str, timeout_ms: int) -> ProducerIdentity:
        """A new epoch for `transactional_id` (fencing every older producer of it), after its
        open transaction is aborted and a half-completed one is completed."""
        if not 0 < timeout_ms <= TIMEOUT_MS_MAX:
            raise InvalidTransactionTimeout(
                f"transaction.timeout.ms={timeout_ms} is outside 1..{TIMEOUT_MS_MAX}."
            )
        async with self._lock(transactional_id):
            state = await self._load(transactional_id)
            if state is not None:
                state = await self._finish_open(state)
            identity = await self._init_producer(transactional_id)
            fresh = TxnState(
                transactional_id,
                identity.producer_id,
                identity.producer_epoch,
                TxnStatus.EMPTY,
                timeout_ms,
                updated_ms=self._clock_ms(),
                sequence=0 if state is None else state.sequence,
            )
            await self._save(fresh)
            return identity

    async def describe(self, transactional_id: str) -> TxnState:
        """The id's newest state (Kafka's DescribeTransactions).

        Raises:
            TransactionalIdNotFound: no producer was initialised with the id.
        """
        if not self._is_mine(transactional_id):
            self._lock(transactional_id)  # raises TransactionCoordinatorUnavailable
        state = await self._load(transactional_id)
        if state is None:
            raise TransactionalIdNotFound(
                f"Transactional id {transactional_id!r} is unknown: begin (InitProducerId) "
                "creates it."
            )
        return state

    async def listed(self) -> list[TxnState]:
        """The newest state of every transactional id this node coordinates (Kafka's
        ListTransactions asks each coordinator), by id."""
        await self._adopt_stored()
        return [state for tid, state in sorted(self._states.items()) if self._is_mine(tid)]

    async def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Sequence
    ) -> None:
        """Record the partitions the transaction writes to (before it writes to them)."""
        async with self._lock(transactional_id):
            current = await self._checked(transactional_id, producer_id, epoch)
            state = self._ongoing(current)
            added = tuple(p for p in dict.fromkeys(partitions) if p not in state.partitions)
            if added or current.status is not TxnStatus.ONGOING:
                await self._save(dataclasses.replace(state, partitions=state.partitions + added))

    async def add_group(
        self, transactional_id: str, producer_id: int, epoch: int, group_id: str
    ) -> None:
        """Record that the transaction commits offsets of `group_id`."""
        async with self._lock(transactional_id):
            current = await self._checked(transactional_id, producer_id, epoch)
            state = self._ongoing(current)
            if group_id not in state.groups or current.status is not TxnStatus.ONGOING:
                # Noted first: the group's offsets come next (TxnOffsetCommit), and a new
                # coordinator of the group must find this transaction holding them.
                await self._blocking(self._store.note_group, group_id, transactional_id)
                groups = tuple(dict.fromkeys((*state.groups, group_id)))
                await self._save(dataclasses.replace(state, groups=groups))

    async def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        offsets: Sequence[PendingOffset],
    ) -> None:
        """Offsets to commit when the transaction commits (TxnOffsetCommit)."""
        async with self._lock(transactional_id):
            state = await self._checked(transactional_id, producer_id, epoch)
            unknown = {o.group_id for o in offsets} - set(state.groups)
            if state.status is not TxnStatus.ONGOING or unknown:
                raise InvalidTxnState(
                    f"Offsets of {sorted(unknown) or 'a group'} outside an ongoing transaction "
                    "that added the group (AddOffsetsToTxn) first."
                )
            replaced = {(o.group_id, o.topic, o.partition) for o in offsets}
            kept = tuple(
                o for o in state.offsets if (o.group_id, o.topic, o.partition) not in replaced
            )
            await self._save(dataclasses.replace(state, offsets=kept + tuple(offsets)))

    async def end(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        commit: bool,
        *,
        bump_epoch: bool = False,
    ) -> ProducerIdentity:
        """Commit or abort the transaction; returns once markers and offsets are written,
        with the producer id and epoch of the next transaction.

        With `bump_epoch` (KIP-890's rule, for lakelog's HTTP transactions) the markers are
        written with the next epoch, which fences the ended one in every partition: a
        produce of the ended transaction still in flight (a client's retry) is refused there
        instead of opening a transaction nobody ends. A retry of such an end, with the epoch
        it ended, is answered again.
        """
        wanted = TxnStatus.COMPLETE_COMMIT if commit else TxnStatus.COMPLETE_ABORT
        preparing = TxnStatus.PREPARE_COMMIT if commit else TxnStatus.PREPARE_ABORT
        async with self._lock(transactional_id):
            if bump_epoch:
                state = await self._load(transactional_id)
                if _ended_by(state, producer_id, epoch, wanted):
                    return ProducerIdentity(state.producer_id, state.producer_epoch)
                if _ended_by(state, producer_id, epoch, preparing):
                    # this end's own retry, prepared at the next epoch (Kafka's answer too)
                    raise ConcurrentTransactions(
                        f"The transaction of {transactional_id!r} is being completed; retry."
                    )
            state = await self._checked(transactional_id, producer_id, epoch)
            # (A prepared state never gets here: _checked answers CONCURRENT_TRANSACTIONS, the
            # client retries, and by then the sweep has completed it.)
            if state.status is TxnStatus.ONGOING:
                state = await self._end_ongoing(state, commit, bump_epoch)
            elif bump_epoch and state.status.complete:
                pass  # nothing open (HTTP): ending it is a no-op, as Kafka's clients make it
            elif state.status is not wanted:  # a retry of a completed end is answered again
                verb = "commit" if commit else "abort"
                raise InvalidTxnState(
                    f"Cannot {verb} transactional id {transactional_id!r}: it is "
                    f"{state.status.value}."
                )
            return ProducerIdentity(state.producer_id, state.producer_epoch)

    async def _end_ongoing(self, state: TxnState, commit: bool, bump_epoch: bool) -> TxnState:
        if not bump_epoch:
            return await self._complete(await self._prepare(state, commit))
        identity = await self._init_producer(state.transactional_id)
        if identity.producer_id == state.producer_id:
            state = dataclasses.replace(state, producer_epoch=identity.producer_epoch)
        done = await self._complete(await self._prepare(state, commit))
        if (done.producer_id, done.producer_epoch) == (
            identity.producer_id,
            identity.producer_epoch,
        ):
            return done
        # The epochs ran out: the markers kept the old id, the next transaction has a new one.
        next_id = {"producer_id": identity.producer_id, "producer_epoch": identity.producer_epoch}
        return await self._save(dataclasses.replace(done, **next_id))

    # ---- completing ----------------------------------------------------------------------

    async def _finish_open(self, state: TxnState) -> TxnState:
        if state.status is TxnStatus.ONGOING:
            # Aborted with a bumped epoch, as Kafka does: its markers fence the producer's
            # older epoch in every partition, so a zombie's late batch is refused there.
            identity = await self._init_producer(state.transactional_id)
            if identity.producer_id == state.producer_id:  # else the epochs ran out
                state = dataclasses.replace(state, producer_epoch=identity.producer_epoch)
            return await self._complete(await self._prepare(state, commit=False))
        if state.status.preparing:
            return await self._complete(state)
        return state

    async def _prepare(self, state: TxnState, commit: bool) -> TxnState:
        status = TxnStatus.PREPARE_COMMIT if commit else TxnStatus.PREPARE_ABORT
        return await self._save(dataclasses.replace(state, status=status))

    async def _complete(self, state: TxnState) -> TxnState:
        """Write the markers (and, on commit, the offsets) of a prepared transaction, then
        record it complete. A failure leaves it prepared: the sweep tries again."""
        commit = state.status is TxnStatus.PREPARE_COMMIT
        marker = TransactionMarker(
            state.producer_id, state.producer_epoch, CONTROL_COMMIT if commit else CONTROL_ABORT
        )
        for partition in state.partitions:
            try:
                await self._write_marker(partition.topic, partition.partition, marker)
            except ProducerFenced:
                pass  # a newer epoch wrote there since: its coordinator ended this one
        by_group = _by_group(state.offsets) if commit else {}
        for group_id in state.groups:
            await self._commit_offsets(group_id, by_group.get(group_id, []), state.producer_id)
            await self._blocking(self._store.forget_group, group_id, state.transactional_id)
        status = TxnStatus.COMPLETE_COMMIT if commit else TxnStatus.COMPLETE_ABORT
        done = dataclasses.replace(state, status=status, partitions=(), groups=(), offsets=())
        return await self._save(done)

    async def _sweep_forever(self) -> None:
        last_scan = 0.0
        while True:
            await asyncio.sleep(SWEEP_S)
            try:
                if time.monotonic() - last_scan >= RESCAN_S:
                    last_scan = time.monotonic()
                    await self._adopt_stored()
                await self.sweep()
            except Exception as error:  # noqa: BLE001 - the next sweep tries again
                log.warning("transaction sweep failed: %r", error)

    async def _adopt_stored(self) -> None:
        """Load the stored ids this node coordinates (a restart, a failover)."""
        for transactional_id in await self._blocking(self._store.transactional_ids):
            if transactional_id in self._states or not self._is_mine(transactional_id):
                continue
            state = await self._blocking(self._store.load, transactional_id)
            if state is not None:
                self._states[transactional_id] = state

    async def sweep(self) -> None:
        """One pass over the ids coordinated here: a transaction open past its timeout is
        aborted, a half-completed one completed (the sweeper runs it every SWEEP_S)."""
        now_ms = self._clock_ms()
        for transactional_id, state in list(self._states.items()):
            if not self._is_mine(transactional_id):
                self._states.pop(transactional_id, None)
                continue
            if not (state.expired(now_ms) or state.status.preparing):
                continue
            async with self._lock(transactional_id):
                current = await self._load(transactional_id)
                if current is not None and (current.expired(now_ms) or current.status.preparing):
                    log.info("completing transaction of %r (%s)", transactional_id, current.status)
                    await self._finish_open(current)

    # ---- state -----------------------------------------------------------------------------

    def _is_mine(self, transactional_id: str) -> bool:
        return self.coordinator_of(transactional_id) == self.node_id

    def _lock(self, transactional_id: str) -> asyncio.Lock:
        if not self._is_mine(transactional_id):
            raise TransactionCoordinatorUnavailable(
                f"Node {self.coordinator_of(transactional_id)} coordinates transactional id "
                f"{transactional_id!r}; find its coordinator again."
            )
        return self._locks.setdefault(transactional_id, asyncio.Lock())

    async def _load(self, transactional_id: str) -> TxnState | None:
        state = self._states.get(transactional_id)
        if state is None:
            state = await self._blocking(self._store.load, transactional_id)
            if state is not None:
                self._states[transactional_id] = state
        return state

    async def _checked(self, transactional_id: str, producer_id: int, epoch: int) -> TxnState:
        state = await self._load(transactional_id)
        if state is None or state.producer_id != producer_id:
            raise InvalidProducerIdMapping(
                f"Producer id {producer_id} is not the one of transactional id "
                f"{transactional_id!r}; initialise the producer (InitProducerId) again."
            )
        if epoch != state.producer_epoch:
            raise ProducerFenced(
                f"Epoch {epoch} of transactional id {transactional_id!r} is fenced: a producer "
                f"initialised it again (epoch {state.producer_epoch})."
            )
        if state.status.preparing:
            raise ConcurrentTransactions(
                f"The transaction of {transactional_id!r} is being completed; retry."
            )
        return state

    def _ongoing(self, state: TxnState) -> TxnState:
        """The state as an ongoing transaction: a new one starts empty, with its clock."""
        if state.status is TxnStatus.ONGOING:
            return state
        return dataclasses.replace(
            state,
            status=TxnStatus.ONGOING,
            partitions=(),
            groups=(),
            offsets=(),
            started_ms=self._clock_ms(),
        )

    async def _save(self, state: TxnState) -> TxnState:
        state = dataclasses.replace(state, updated_ms=self._clock_ms())
        try:
            stored = await self._blocking(self._store.save, state)
        except StateTaken:
            self._states.pop(state.transactional_id, None)  # read it again next time
            raise ConcurrentTransactions(
                f"Another coordinator changed transactional id {state.transactional_id!r}; retry."
            ) from None
        self._states[state.transactional_id] = stored
        return stored


def _ended_by(state: TxnState | None, producer_id: int, epoch: int, wanted: TxnStatus) -> bool:
    """Whether `state` is what an end with a bumped epoch left of the transaction of
    (`producer_id`, `epoch`): status `wanted` (its outcome, or its prepared outcome while
    it is being completed), the next epoch. A zombie cannot get here:
    a newer producer's InitProducerId bumps the epoch twice (abort, then its own)."""
    return (
        state is not None
        and state.status is wanted
        and state.producer_id == producer_id
        and state.producer_epoch == epoch + 1
    )


def _by_group(offsets: Sequence[PendingOffset]) -> dict[str, list[OffsetCommit]]:
    by_group: dict[str, list[OffsetCommit]] = {}
    for offset in offsets:
        commit = OffsetCommit(
            offset.topic,
            offset.partition,
            offset.offset,
            offset.metadata,
            leader_epoch=offset.leader_epoch,
        )
        by_group.setdefault(offset.group_id, []).append(commit)
    return by_group
