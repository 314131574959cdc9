"""The replicated cluster's metadata in the embedded coordinator's SQLite database (docs/replication.md).

Tables (each row's version column is its epoch, the compare-and-set token of its writes):
- `nodes`: a data node's registration and the data directory it came from; `node_epoch` grows by one on each
  registration of the id.
- `partition_state`: a replicated partition's replicas and its LeaderAndIsr; `partition_epoch` is the version.
- `controller`: one row, the controller epoch; the single coordinator claims a new one when it starts, and a
  state quoting another is refused.
Every change is one BEGIN IMMEDIATE transaction, so a lost race cannot interleave: a write whose partition
epoch is no longer the one read stores nothing and answers False.
"""
from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

import pyarrow as pa

from fabric.common.errors import UnknownTopicError
from fabric.common.types import (
    LeaderAndIsr,
    NodeInfo,
    PartitionAssignment,
    PartitionRegistration,
    TopicInfo,
    TopicPartition,
)
from fabric.coordinator import validation
from fabric.coordinator.interface import StateUpdates

log = logging.getLogger(__name__)
SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    id INTEGER PRIMARY KEY, address TEXT NOT NULL, rack TEXT, node_epoch INTEGER NOT NULL,
    directory_id TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS partition_state (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, replicas TEXT NOT NULL, leader INTEGER,
    leader_epoch INTEGER NOT NULL, isr TEXT NOT NULL, partition_epoch INTEGER NOT NULL,
    controller_epoch INTEGER NOT NULL, target TEXT NOT NULL DEFAULT '[]', PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS controller (id INTEGER PRIMARY KEY CHECK (id = 0), epoch INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS producer_id_blocks (block INTEGER PRIMARY KEY, principal TEXT NOT NULL);
"""
_COLUMNS = "topic, partition, replicas, leader, leader_epoch, isr, partition_epoch, controller_epoch, target"


class _LostRace(Exception):
    """A partition epoch changed since it was read: roll back and answer False."""


def _registration(row: tuple) -> tuple[TopicPartition, PartitionRegistration]:
    topic, p, replicas, leader, leader_epoch, isr, partition_epoch, controller_epoch, target = row
    state = LeaderAndIsr(leader, leader_epoch, tuple(json.loads(isr)), partition_epoch, controller_epoch)
    assignment = PartitionAssignment(tuple(json.loads(replicas)), tuple(json.loads(target)))
    return (topic, p), PartitionRegistration(assignment, state)


def _values(tp: TopicPartition, reg: PartitionRegistration) -> tuple:
    s, a = reg.state, reg.assignment
    return (*tp, json.dumps(list(a.replicas)), s.leader, s.leader_epoch, json.dumps(list(s.isr)),
            s.partition_epoch, s.controller_epoch, json.dumps(list(a.target)))


class SqliteReplication:
    """The replication methods of the Coordinator interface over the tables above, for SqliteCoordinator."""

    _db: Callable[[], sqlite3.Connection]
    _tx: Callable[[], AbstractContextManager[sqlite3.Connection]]
    _row: Callable[[sqlite3.Connection, str], tuple]
    _info: Callable[[tuple], TopicInfo]
    _insert_topic: Callable[[sqlite3.Connection, TopicInfo], None]
    _cached: Callable[..., Any]
    _registrations: dict[str, tuple[bytes, dict[TopicPartition, PartitionRegistration]]]

    # -- the controller epoch ----------------------------------------------------------------------------------
    @staticmethod
    def _epoch(db: sqlite3.Connection) -> int:
        row = db.execute("SELECT epoch FROM controller WHERE id=0").fetchone()
        return row[0] if row else 0

    def controller_epoch(self) -> int:
        return self._epoch(self._db())

    def claim_controller_epoch(self) -> int:
        """Become the controller under a new epoch (the last one + 1); every state the previous one decides
        after this is refused. The single coordinator of a SQLite store calls it when it starts."""
        with self._tx() as db:
            epoch = self._epoch(db) + 1
            db.execute("INSERT INTO controller VALUES (0, ?) ON CONFLICT (id) DO UPDATE SET epoch=excluded.epoch",
                       (epoch,))
        return epoch

    def claim_producer_id_block(self, block: int, principal: str) -> bool:
        with self._tx() as db:
            return db.execute("INSERT OR IGNORE INTO producer_id_blocks VALUES (?, ?)",
                              (block, principal)).rowcount == 1

    def producer_id_block_owner(self, block: int) -> str | None:
        row = self._db().execute("SELECT principal FROM producer_id_blocks WHERE block=?", (block,)).fetchone()
        return None if row is None else str(row[0])

    # -- nodes ---------------------------------------------------------------------------------------------
    def register_node(self, node_id: int, address: str, rack: str | None = None, *, directory_id: str) -> NodeInfo:
        validation.node(node_id, address, rack, directory_id)
        with self._tx() as db:
            row = db.execute("SELECT node_epoch FROM nodes WHERE id=?", (node_id,)).fetchone()
            epoch = (row[0] if row else 0) + 1
            db.execute("INSERT OR REPLACE INTO nodes (id, address, rack, node_epoch, directory_id) VALUES "
                       "(?, ?, ?, ?, ?)", (node_id, address, rack, epoch, directory_id))
        log.info("node %d registered at %s (rack %s, data directory %s), node epoch %d", node_id, address, rack,
                 directory_id, epoch)
        return NodeInfo(node_id, address, rack, epoch, directory_id=directory_id)

    def registered_nodes(self) -> list[NodeInfo]:
        return [NodeInfo(i, address, rack, epoch, directory_id=directory) for i, address, rack, epoch, directory
                in self._db().execute("SELECT id, address, rack, node_epoch, directory_id FROM nodes ORDER BY id")]

    # -- assignments and states ----------------------------------------------------------------------------
    def _insert_partitions(self, db: sqlite3.Connection, name: str,
                           partitions: Mapping[int, PartitionRegistration]) -> None:
        db.executemany(f"INSERT INTO partition_state ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       [_values((name, p), reg) for p, reg in sorted(partitions.items())])

    @staticmethod
    def _replicated(db: sqlite3.Connection, name: str) -> bool:
        return db.execute("SELECT 1 FROM partition_state WHERE topic=? LIMIT 1", (name,)).fetchone() is not None

    def create_replicated_topic(self, name: str, config: dict[str, str], value_schema: pa.Schema | None,
                                partitions: Mapping[int, PartitionRegistration]) -> TopicInfo:
        count = len(partitions) if isinstance(partitions, Mapping) else 0
        info = validation.new_topic(name, count, config, value_schema)
        with self._tx() as db:
            validation.new_partitions(name, partitions, 0, self._epoch(db))
            self._insert_topic(db, info)
            self._insert_partitions(db, name, partitions)
        return info

    def add_replicated_partitions(self, name: str, partitions: Mapping[int, PartitionRegistration]) -> TopicInfo:
        with self._tx() as db:
            info = self._info(self._row(db, name))
            validation.replicated_growth(name, self._replicated(db, name))
            validation.new_partitions(name, partitions, info.partitions, self._epoch(db))
            total = info.partitions + len(partitions)
            db.execute("UPDATE topics SET partitions=? WHERE name=?", (total, name))
            self._insert_partitions(db, name, partitions)
        return replace(info, partitions=total)

    def replicated(self, name: str) -> bool:
        return self._replicated(self._db(), name)

    def partition_registrations(self, topics: list[str] | None = None) -> dict[TopicPartition, PartitionRegistration]:
        """Every replicated partition's registration (or those of `topics`), in order. All of them, what the
        controller answers each node's heartbeat from, are kept while the metadata version they were read under
        is current (SqliteCoordinator._cached): a write of any process replaces it."""
        if topics is None:
            return dict(self._cached(self._registrations, "", lambda db: dict(_registration(row) for row in db.execute(
                f"SELECT {_COLUMNS} FROM partition_state ORDER BY topic, partition"))))
        rows = self._db().execute(f"SELECT {_COLUMNS} FROM partition_state WHERE topic IN (SELECT value FROM "
                                  "json_each(?)) ORDER BY topic, partition", (json.dumps(list(topics)),))
        return dict(_registration(row) for row in rows)

    def update_partition_states(self, updates: StateUpdates) -> bool:
        try:
            with self._tx() as db:
                epoch = self._epoch(db)
                for tp, (expected, new) in sorted(updates.items()):
                    found = db.execute(f"SELECT {_COLUMNS} FROM partition_state WHERE topic=? AND partition=?",
                                       tp).fetchone()
                    if found is None:
                        raise UnknownTopicError(f"{tp[0]}-{tp[1]} is not a replicated partition (deleted?)")
                    stored = _registration(found)[1]
                    if stored.state.partition_epoch != expected:
                        raise _LostRace()
                    reg = validation.state_update(tp, stored, new, epoch)
                    db.execute("UPDATE partition_state SET replicas=?, leader=?, leader_epoch=?, isr=?, "
                               "partition_epoch=?, controller_epoch=?, target=? WHERE topic=? AND partition=? AND "
                               "partition_epoch=?", (*_values(tp, reg)[2:], *tp, expected))
        except _LostRace:
            return False
        return True
