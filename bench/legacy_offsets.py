"""The peers of the offsets benchmark: the stores as they kept group offsets before the offsets topic (commit
0ffd338), so `make bench` can set today's commits beside yesterday's in one run on one machine.

- TableOffsets: a row per (group, topic, partition) in SQLite's `offsets` table, one write transaction per
  commit (the table is still created, and read once for the migration).
- ZnodeOffsets: a znode per (group, topic, partition) under /consumers, written by one ZooKeeper multi-op per
  commit, each leaf version-checked, after reading the group state's version (ZooKeeper fsyncs every write).

Both check the member's generation as the old stores did; neither is used outside the benchmark.
"""
from __future__ import annotations

from kazoo.client import TransactionRequest

from fabric.common.clock import SYSTEM_CLOCK
from fabric.common.types import CommittedOffset, TopicPartition
from fabric.coordinator import validation
from fabric.coordinator import zk_layout as layout
from fabric.coordinator.election import EpochToken
from fabric.coordinator.sqlite_store import SqliteCoordinator
from fabric.coordinator.zk_store import ZkCoordinator


class TableOffsets(SqliteCoordinator):
    """SqliteCoordinator with its offsets in the `offsets` table, as before the offsets topic."""

    def commit_offsets(self, group: str, offsets: dict[TopicPartition, int], metadata: str = "",
                       generation: int = -1, member_id: str = "") -> None:
        validation.offsets(group, offsets, metadata)
        now = SYSTEM_CLOCK.now_ms()
        with self._tx() as db:
            self._groups.validate_commit(group, member_id, generation)
            db.executemany("INSERT OR REPLACE INTO offsets VALUES (?, ?, ?, ?, ?, ?)",
                           [(group, t, p, o, metadata, now) for (t, p), o in offsets.items()])

    def committed(self, group: str, topics: list[str] | None = None) -> dict[TopicPartition, CommittedOffset]:
        rows = self._db().execute(
            "SELECT topic, partition, next_offset, metadata, commit_ms FROM offsets WHERE grp=?", (group,))
        return {(t, p): CommittedOffset(o, m, ms) for t, p, o, m, ms in rows if topics is None or t in topics}


class ZnodeOffsets(ZkCoordinator):
    """ZkCoordinator with its offsets in znodes under /consumers, as before the offsets topic."""

    def commit_offsets(self, group: str, offsets: dict[TopicPartition, int], metadata: str = "",
                       generation: int = -1, member_id: str = "") -> None:
        validation.offsets(group, offsets, metadata)
        items = sorted(offsets.items())

        def build(txn: TransactionRequest, token: EpochToken | None) -> None:
            state_stat = self.client.exists(layout.group_state(group))
            self._groups.validate_commit(group, member_id, generation)
            if state_stat is not None:
                txn.check(layout.group_state(group), state_stat.version)  # the generation checked is current
            now = SYSTEM_CLOCK.now_ms()
            parents = sorted({layout.group(group), layout.group_offsets(group)}
                             | {layout.group_topic_offsets(group, t) for (t, _), _ in items})
            for path, found in zip(parents, self.writer.get_many(parents), strict=True):
                if found is None:
                    txn.create(path)
            leaves = [layout.offset(group, t, p) for (t, p), _ in items]
            for path, found, (_, next_offset) in zip(leaves, self.writer.get_many(leaves), items, strict=True):
                data = layout.offset_data(CommittedOffset(next_offset, metadata, now))
                if found is None:
                    txn.create(path, data)
                else:
                    txn.set_data(path, data, version=found[1].version)
        self.writer.write(build)

    def committed(self, group: str, topics: list[str] | None = None) -> dict[TopicPartition, CommittedOffset]:
        names = [layout.name_of(t) for t in self.writer.children(layout.group_offsets(group))]
        keys = [(t, int(p)) for t in names if topics is None or t in topics
                for p in self.writer.children(layout.group_topic_offsets(group, t))]
        found = self.writer.get_many([layout.offset(group, t, p) for t, p in keys])
        return {key: layout.committed_offset(f[0]) for key, f in zip(keys, found, strict=True) if f is not None}
