"""Group states as keyed records in the offsets topic a coordinator instance owns (Kafka's GroupMetadataKey beside
its OffsetCommitKey in `__consumer_offsets`): the GroupStore of a cluster's replicated offsets topic.

Memory is the truth while the instance is active: `read` and the compare-and-set of `write` work on each group's
latest state in memory, its version a counter. A write that changes what is persisted appends the group's record
(offsets_records.group_key, in the group's offsets partition) through the offsets topic's own append path (acks=all,
under the partition's write lock, fenced by the instance's epoch, as an offset commit); memory takes the new state
only once that append succeeded, still under the partition's lock, so a commit checked after it sees the new
generation. Deleting a group appends a tombstone. What is persisted is the state without liveness (the members'
heartbeat times): as in Kafka, heartbeats are not persisted, so a transition that only moved a heartbeat time
changes memory and appends nothing. A group's writes are serialised (one at a time across its append).

Loading: when the instance takes the leadership of the topic, the group records are read with the offsets
(OffsetsTopic.companion), and every member's liveness restarts then: members get a whole session timeout to reach
the new instance. Until loaded, calls are refused as the offsets are (CoordinatorUnavailableError, retriable,
while loading; NotControllerError on an instance that is not the active one).

Migration: the first load of a topic without the groups' migration record appends the groups the store kept before
(its SQLite table or ZooKeeper znodes), then that record, so a group deleted later is never brought back. The old
copies are left where they were, unread.
"""
from __future__ import annotations

import contextlib
import json
import logging
import threading
from dataclasses import asdict
from typing import Any, Iterator, Sequence

import pyarrow as pa

from fabric.common.clock import SYSTEM_CLOCK, Clock
from fabric.coordinator.group_store import GroupStore
from fabric.coordinator.groups import GroupState
from fabric.coordinator.offsets_records import GROUPS, OFFSETS_TOPIC, Row, group_key, offsets_partition
from fabric.coordinator.offsets_topic import OffsetsTopic

log = logging.getLogger(__name__)
LIVENESS = "last_heartbeat_ms"  # a member's field that is kept in memory only
GROUP_RECORD = b'["group",'  # how every group record's key begins (offsets_records.group_key)


def persisted(state: GroupState) -> str:
    """The state as its record keeps it: canonical JSON without the members' heartbeat times."""
    raw = asdict(state)
    for member in raw["members"].values():
        del member[LIVENESS]
    return json.dumps(raw, sort_keys=True)


def restored(text: str, now_ms: int) -> GroupState:
    """The state a record kept, every member last heard of at `now_ms`."""
    raw = json.loads(text)
    for member in raw["members"].values():
        member[LIVENESS] = now_ms
    return GroupState.from_json(json.dumps(raw))


class TopicGroupStore(GroupStore):
    """Group states in `topic` (an offsets topic this instance owns), loaded with it; `legacy` is the store that kept
    them before (migrated into the topic once)."""

    def __init__(self, topic: OffsetsTopic, legacy: GroupStore | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.topic, self.legacy, self.clock = topic, legacy, clock
        self._states: dict[str, tuple[GroupState, int]] = {}
        self._version = 0  # the last version handed out (0: a group memory does not hold)
        self._guard = threading.Lock()  # memory's; never held across an append
        # a group's writer lock, held by its write across the append, and how many writes hold or wait for it:
        # dropped when none does, so memory holds locks for the groups being written, not every group ever seen
        self._writers: dict[str, tuple[threading.Lock, int]] = {}
        self._loading: dict[str, str] = {}  # the persisted states the load in progress read so far
        topic.companion = self

    # -- the GroupStore ------------------------------------------------------------------------------------
    def read(self, group: str) -> tuple[GroupState | None, Any]:
        self.topic.check_serving(offsets_partition(group, self.topic.partitions))
        with self._guard:
            found = self._states.get(group)
        return (found[0].copy(), found[1]) if found else (None, 0)

    def write(self, group: str, state: GroupState | None, version: Any) -> bool:
        self.topic.check_serving(offsets_partition(group, self.topic.partitions))
        with self._writing(group):
            with self._guard:
                found = self._states.get(group)
            if (found[1] if found else 0) != version:
                return False
            text = persisted(state) if state is not None else None
            if text == (persisted(found[0]) if found else None):
                self._keep(group, state)  # only liveness moved (or a group never stored was forgotten)
            else:
                self.topic.append(offsets_partition(group, self.topic.partitions), [self._row(group, state, text)],
                                  then=lambda: self._keep(group, state))
        return True

    @contextlib.contextmanager
    def _writing(self, group: str) -> Iterator[None]:
        """Hold `group`'s writer lock (one write of a group at a time; other groups' go on)."""
        with self._guard:
            lock, users = self._writers.get(group, (threading.Lock(), 0))
            self._writers[group] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._writers[group]
                if users == 1:
                    del self._writers[group]
                else:
                    self._writers[group] = (lock, users - 1)

    def list(self) -> list[str]:
        """The groups of the partitions this instance serves (OffsetsTopic.served)."""
        served, count = set(self.topic.served()), self.topic.partitions
        with self._guard:
            return sorted(g for g in self._states if offsets_partition(g, count) in served)

    def _keep(self, group: str, state: GroupState | None) -> None:
        with self._guard:
            self._version += 1
            if state is None:
                self._states.pop(group, None)
            else:
                self._states[group] = (state, self._version)

    def _row(self, group: str, state: GroupState | None, text: str | None) -> Row:
        """The group's record: its persisted state `text`, or a tombstone."""
        if state is None or text is None:
            return group_key(group), None
        return group_key(group), {"next_offset": state.generation, "metadata": text,
                                  "commit_ms": self.clock.now_ms()}

    # -- the offsets topic's Companion: loaded with the offsets ---------------------------------------------
    def loading(self) -> None:
        self._loading = {}

    def apply(self, records: pa.RecordBatch) -> None:
        for key, value in zip(records.column(1).to_pylist(), records.column(3).to_pylist(), strict=True):
            if key.startswith(GROUP_RECORD):
                group = json.loads(key)[1]
                if value is None:
                    self._loading.pop(group, None)
                else:
                    self._loading[group] = value["metadata"]

    def loaded(self, partitions: Sequence[int]) -> None:
        """Migrate the legacy store's groups (once), then serve what the load read of `partitions`' groups (in
        place of what memory held of them), every member alive now."""
        now, count = self.clock.now_ms(), self.topic.partitions
        if self.legacy is not None and len(partitions) == count:  # (it appends to every partition)
            self._migrate(self.legacy)
        with self._guard:
            self._states = {g: found for g, found in self._states.items()
                            if offsets_partition(g, count) not in partitions}
            for group, text in sorted(self._loading.items()):
                self._version += 1
                self._states[group] = (restored(text, now), self._version)
        log.info("group states loaded from %s: %d group(s)", OFFSETS_TOPIC, len(self._loading))
        self._loading = {}

    def _migrate(self, legacy: GroupStore) -> None:
        """Append the group states `legacy` kept, once (the log records that it was done)."""
        with self.topic.log.migrating(GROUPS) as pending:
            if not pending:
                return
            by_partition: dict[int, list[Row]] = {}
            for group in legacy.list():
                state = legacy.load(group)
                if state is not None:
                    text = self._loading[group] = persisted(state)
                    by_partition.setdefault(offsets_partition(group, self.topic.partitions), []).append(
                        self._row(group, state, text))
            for partition, rows in sorted(by_partition.items()):
                self.topic.append(partition, rows)
            if by_partition:
                log.warning("group states: %d group(s) moved to the %s topic (the old copies are no longer read)",
                            sum(len(rows) for rows in by_partition.values()), OFFSETS_TOPIC)
