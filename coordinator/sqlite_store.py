"""The embedded coordinator: metadata and group offsets in a SQLite database inside the fabric directory.

WAL mode plus a busy timeout makes it safe for many processes at once; every change is one transaction.
When the database cannot be opened for writing (a full disk, a read-only filesystem), it is opened read-only:
reads keep working and every write fails with a StorageError naming the problem until the disk is fixed.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import sqlite3
import threading
import time
import weakref
from dataclasses import replace
from typing import Callable, Iterator, Sequence, TypeVar

import pyarrow as pa

from fabric.common.clock import SYSTEM_CLOCK
from fabric.common.errors import TopicExistsError, UnknownTopicError
from fabric.common.types import (
    CommittedOffset,
    PartitionRegistration,
    TopicInfo,
    TopicPartition,
    TransactionRecord,
    transaction_sequence,
)
from fabric.coordinator import disk, sqlite_replicas, transactions, validation
from fabric.coordinator.group_store import GroupMembership, GroupService, SqliteGroupStore, conflict_backoff
from fabric.coordinator.interface import Coordinator
from fabric.coordinator.metadata_version import MetadataVersion
from fabric.coordinator.offsets_log import LocalOffsetsLog
from fabric.coordinator.offsets_records import OFFSETS_TOPIC
from fabric.coordinator.offsets_topic import OffsetsTopic
from fabric.coordinator.sqlite_replicas import SqliteReplication
from fabric.coordinator.transaction_offsets import TransactionOffsets

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_CACHED_NAMES = 10_000  # entries a cache by metadata version keeps at once (a client may ask of any name)
BUSY_TIMEOUT_S = 60.0  # how long a statement waits for another process's lock on the database
_SCHEMA = """
CREATE TABLE IF NOT EXISTS topics (
    name TEXT PRIMARY KEY, partitions INTEGER NOT NULL, config TEXT NOT NULL, value_schema BLOB,
    topic_id TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS offsets (
    grp TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL, next_offset INTEGER NOT NULL,
    metadata TEXT NOT NULL, commit_ms INTEGER NOT NULL, PRIMARY KEY (grp, topic, partition));
CREATE TABLE IF NOT EXISTS transactional_ids (
    id TEXT PRIMARY KEY, sequence INTEGER NOT NULL, commit_ms INTEGER NOT NULL, writers TEXT NOT NULL DEFAULT '');
"""
_UPSERT_TRANSACTION = """
INSERT INTO transactional_ids (id, sequence, commit_ms) VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE
SET sequence = excluded.sequence, commit_ms = excluded.commit_ms WHERE excluded.sequence > sequence"""
_STORE_TRANSACTION = """
INSERT INTO transactional_ids (id, sequence, commit_ms, writers) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO UPDATE
SET sequence = excluded.sequence, commit_ms = excluded.commit_ms, writers = excluded.writers"""


MIGRATIONS = (("partition_state", "target", "TEXT NOT NULL DEFAULT '[]'"),  # a reassignment's target
              ("topics", "topic_id", "TEXT NOT NULL DEFAULT ''"),  # topic ids ('' for older topics)
              ("transactional_ids", "writers", "TEXT NOT NULL DEFAULT ''"),  # a transaction's writers
              ("nodes", "directory_id", "TEXT NOT NULL DEFAULT ''"))  # the data directory a node registered from


def _migrate(db: sqlite3.Connection) -> None:
    """Bring a database written by an older version to the current schema: add the columns it lacks (another
    process opening it at the same time may add one first)."""
    def columns(table: str) -> set[str]:
        return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
    for table, column, declaration in MIGRATIONS:
        if column in columns(table):
            continue
        try:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
        except sqlite3.OperationalError:
            if column in columns(table):  # added by another process since the look above
                continue
            raise
        db.commit()
        log.info("metadata database: table %s gained column %s", table, column)


def _write_ahead(db: sqlite3.Connection) -> None:
    """Put the database in write-ahead-log mode (kept in the file: once set, a no-op). The switch needs the
    database to itself, and SQLite refuses it at once (SQLITE_BUSY, "database is locked"), without its busy
    timeout, while another connection holds a lock: processes opening a new fabric together (its first CLI
    commands, run side by side) each try it while another creates the tables. Tried again, after the backoff of
    a lost compare-and-set (no condition tells when another process's statement ends), until that timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    for attempt in itertools.count():
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = getattr(exc, "sqlite_errorname", "").startswith("SQLITE_BUSY") or str(exc) == "database is locked"
            if not busy or time.monotonic() > deadline:  # (Python < 3.11 has no sqlite_errorname)
                raise
        conflict_backoff(attempt)


class _Lease:
    """A thread's hold on a connection (of process `pid`; `read_only`: why it could only be opened read-only), given
    back to `idle` when the thread's locals go. A Flight server's handler threads get fresh thread locals on every
    call, so without the pool each call would open (and set up) a connection of its own."""

    def __init__(self, db: sqlite3.Connection, pid: int, read_only: str | None,
                 idle: list[tuple[sqlite3.Connection, int, str | None]]) -> None:
        self.db, self.pid, self.read_only = db, pid, read_only
        self._returned = weakref.finalize(self, idle.append, (db, pid, read_only))

    def close(self) -> None:
        """Close the connection instead of giving it back."""
        self._returned.detach()
        self.db.close()


class SqliteCoordinator(TransactionOffsets, GroupMembership, SqliteReplication, Coordinator):
    """Coordinator state in `path` (created if missing); the replicated cluster's tables: sqlite_replicas; group
    offsets in the offsets topic beside it (`<dir of path>/__consumer_offsets`, coordinator.offsets_topic)."""

    def __init__(self, path: str, unknown_topic: Callable[[str], str | None] = lambda name: None) -> None:
        self.path = path
        self._unknown_topic = unknown_topic  # what to say of a topic it does not know, if not the usual (its data
        # still in the directory: how to register it again)
        self._local = threading.local()
        self._idle: list[tuple[sqlite3.Connection, int, str | None]] = []  # (connection, pid, read-only problem)
        self._warned_read_only = False
        self._topics: dict[str, tuple[bytes, TopicInfo]] = {}  # name: (the version it was read under, metadata)
        self._replicated_topics: dict[str, tuple[bytes, bool]] = {}  # name: (that version, whether replicated)
        self._registrations: dict[str, tuple[bytes, dict[TopicPartition, PartitionRegistration]]] = {}  # "": all
        with disk.disk_errors(path, "open the metadata database"):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self._version = MetadataVersion(f"{path}-version")
            self._db().executescript(_SCHEMA + sqlite_replicas.SCHEMA)
            _migrate(self._db())
            self._migrate_transactions()
            self._groups = GroupService(SqliteGroupStore(self._db, self._tx, self._cached), self._partitions_of)
            self._offsets = OffsetsTopic.in_directory(os.path.join(os.path.dirname(path), OFFSETS_TOPIC),
                                                      legacy=self._legacy_offsets,
                                                      resolve_pending=self.transaction_committed)

    def serves_locally(self) -> bool:
        """True while the offsets topic is the local one (a cluster's coordinator keeps it replicated on nodes)."""
        return isinstance(self.offsets_topic.log, LocalOffsetsLog)

    def topic_on_loop(self, name: str) -> bool:
        """True: a topic is a SQLite row of this machine, and a server's data calls are to the topics kept in its
        own directory (a cluster's replicated ones are refused there), whether or not the offsets topic is (so a
        cluster's coordinator holds consumers' long polls on its loop, as a lone service does, not on workers)."""
        return True

    def commits_on_loop(self, group: str, topics: Sequence[str]) -> bool:
        """True: the metadata and group checks of a commit read SQLite and memory, and either offsets log writes
        queued commits without blocking (a cluster's replicated one sends them from the loop)."""
        return True

    def _db(self) -> sqlite3.Connection:
        """This thread's connection: read-write, or read-only while the disk refuses writes."""
        return self._lease().db

    def _lease(self) -> _Lease:
        """This thread's lease of a connection: an idle one of this process if there is one, else a new one."""
        lease: _Lease | None = getattr(self._local, "lease", None)
        pid = os.getpid()
        if lease is not None and lease.pid == pid:
            return lease
        while self._idle:
            try:
                db, owner, read_only = self._idle.pop()
            except IndexError:  # taken by another thread meanwhile
                break
            if owner == pid:  # (a forked child leaves its parent's connections alone)
                lease = self._local.lease = _Lease(db, pid, read_only, self._idle)
                return lease
        try:
            db, read_only = self._connect(), None
        except sqlite3.Error as exc:
            read_only = disk.sqlite_problem(exc)
            if read_only is None:
                raise
            db = self._connect_read_only(read_only)
        lease = self._local.lease = _Lease(db, pid, read_only, self._idle)
        return lease

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        try:
            _write_ahead(db)
            db.execute("PRAGMA synchronous=NORMAL")
        except BaseException:
            db.close()
            raise
        return db

    def _connect_read_only(self, problem: str) -> sqlite3.Connection:
        """The database opened for reading only: through the WAL index if it exists, else as an immutable file
        (what a full or read-only disk still allows). StorageError if neither opens."""
        failure: sqlite3.Error = sqlite3.OperationalError(problem)
        for query in ("mode=ro", "mode=ro&immutable=1"):
            db = sqlite3.connect(f"file:{self.path}?{query}", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                 check_same_thread=False)
            try:
                db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.Error as exc:
                db.close()
                failure = exc
                continue
            if not self._warned_read_only:
                self._warned_read_only = True
                log.warning("metadata database %s cannot be opened for writing (%s): serving reads only; writes "
                            "fail until the disk is fixed", self.path, disk.state_of(self.path) or problem)
            return db
        raise disk.storage_error(disk.sqlite_problem(failure) or problem, self.path,
                                 "open the metadata database") from failure

    class _Tx:
        """One BEGIN IMMEDIATE transaction, the metadata version replaced first (MetadataVersion.writing); a disk
        problem in it becomes a StorageError (rolled back)."""

        def __init__(self, db: sqlite3.Connection, path: str, version: MetadataVersion) -> None:
            self.db, self.path, self.version = db, path, version
            self._writing = contextlib.ExitStack()

        def __enter__(self) -> sqlite3.Connection:
            with disk.disk_errors(self.path, "write the metadata database"), contextlib.ExitStack() as stack:
                stack.enter_context(self.version.writing())
                self.db.execute("BEGIN IMMEDIATE")
                self._writing = stack.pop_all()
            return self.db

        def __exit__(self, exc_type, exc, tb) -> None:
            with self._writing:
                self._end(exc_type, exc)

        def _end(self, exc_type, exc) -> None:
            failure = exc
            if exc_type is None:
                try:
                    self.db.execute("COMMIT")
                    return
                except sqlite3.Error as commit_failure:
                    failure = commit_failure
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            problem = disk.sqlite_problem(failure)
            if problem is not None:
                raise disk.storage_error(problem, self.path, "write the metadata database") from failure
            if failure is not exc:
                raise failure

    def _tx(self) -> _Tx:
        """A write transaction; a read-only connection is reopened for writing first (the disk may be fixed)."""
        if self._lease().read_only is not None:
            self.close()
            problem = self._lease().read_only
            if problem is not None:
                raise disk.storage_error(problem, self.path, "write the metadata database")
        return self._Tx(self._db(), self.path, self._version)

    @staticmethod
    def _info(row: tuple) -> TopicInfo:
        name, partitions, config, schema, topic_id = row
        value_schema = pa.ipc.read_schema(pa.py_buffer(schema)) if schema else None
        return TopicInfo(name, partitions, json.loads(config), value_schema, topic_id)

    def _row(self, db: sqlite3.Connection, name: str) -> tuple:
        row = db.execute("SELECT name, partitions, config, value_schema, topic_id FROM topics WHERE name=?",
                         (name,)).fetchone()
        if row is None:
            raise UnknownTopicError(self._unknown_topic(name) or f"topic {name!r} does not exist; create it with "
                                    f"`fabric topics create {name}` or create_topic()")
        return row

    @staticmethod
    def _insert_topic(db: sqlite3.Connection, info: TopicInfo) -> None:
        blob = info.value_schema.serialize().to_pybytes() if info.value_schema is not None else None
        try:
            db.execute("INSERT INTO topics (name, partitions, config, value_schema, topic_id) VALUES (?, ?, ?, ?, ?)",
                       (info.name, info.partitions, json.dumps(info.config, sort_keys=True), blob, info.topic_id))
        except sqlite3.IntegrityError:
            raise TopicExistsError.of(info.name) from None

    def create_topic(self, name: str, partitions: int, config: dict[str, str],
                     value_schema: pa.Schema | None) -> TopicInfo:
        info = validation.new_topic(name, partitions, config, value_schema)
        with self._tx() as db:
            self._insert_topic(db, info)
        return info

    def delete_topic(self, name: str) -> None:
        with self._tx() as db:
            self._row(db, name)
            for table, column in (("topics", "name"), ("partition_state", "topic")):
                db.execute(f"DELETE FROM {table} WHERE {column}=?", (name,))
        self._offsets.forget_topic(name)

    def topic(self, name: str) -> TopicInfo:
        """The topic's metadata, read again only once a write transaction (of any process) replaced the metadata
        version it was read under."""
        return self._cached(self._topics, name, lambda db: self._info(self._row(db, name)))

    def replicated(self, name: str) -> bool:
        """Whether `name` is a replicated topic, cached as topic() is (every produce, fetch and commit asks)."""
        return self._cached(self._replicated_topics, name, lambda db: self._replicated(db, name))

    def _cached(self, cache: dict[str, tuple[bytes, T]], name: str, read: Callable[[sqlite3.Connection], T]) -> T:
        """cache[name] while the metadata version it was read under is current; else read(db) again, kept when
        no write was in flight meanwhile (MetadataVersion). A cache holds at most MAX_CACHED_NAMES names (names of
        no topic or group are asked too), emptied when it would hold more."""
        cached = cache.get(name)
        if cached is not None and cached[0] == self._version.current():
            return cached[1]
        version = self._version.settled()
        value = read(self._db())
        if version is not None and self._version.current() == version:
            if len(cache) >= MAX_CACHED_NAMES:
                cache.clear()
            cache[name] = (version, value)
        return value

    def list_topics(self) -> list[str]:
        return [r[0] for r in self._db().execute("SELECT name FROM topics ORDER BY name")]

    def alter_topic_config(self, name: str, config: dict[str, str | None]) -> TopicInfo:
        with self._tx() as db:
            info = self._info(self._row(db, name))
            merged = validation.config_change(name, info.config, config)
            db.execute("UPDATE topics SET config=? WHERE name=?", (json.dumps(merged, sort_keys=True), name))
        return replace(info, config=merged)

    def set_partitions(self, name: str, total: int) -> TopicInfo:
        validation.partition_count(name, total)
        with self._tx() as db:
            info = self._info(self._row(db, name))
            validation.partition_growth(name, info.partitions, total)
            validation.plain_growth(name, self._replicated(db, name))
            db.execute("UPDATE topics SET partitions=? WHERE name=?", (total, name))
        return replace(info, partitions=total)

    def _legacy_offsets(self) -> Iterator[tuple[str, TopicPartition, CommittedOffset]]:
        """The offsets an older version kept in the `offsets` table (migrated to the offsets topic once)."""
        for group, topic, partition, offset, metadata, commit_ms in self._db().execute(
                "SELECT grp, topic, partition, next_offset, metadata, commit_ms FROM offsets"):
            yield group, (topic, partition), CommittedOffset(offset, metadata, commit_ms)

    def _change_transaction(self, transactional_id: str,
                            change: Callable[[TransactionRecord], TransactionRecord | None]
                            ) -> TransactionRecord | None:
        with self._tx() as db:
            record = change(self._transaction(db, transactional_id))
            if record is not None:
                self._store_transaction(db, record)
        return record

    def _transaction_records(self) -> list[TransactionRecord]:
        rows = self._db().execute("SELECT id, sequence, writers FROM transactional_ids").fetchall()
        return [transactions.from_json(*row) for row in rows]

    def transaction_record(self, transactional_id: str) -> TransactionRecord:
        return self._transaction(self._db(), validation.transactional_id(transactional_id))

    @staticmethod
    def _transaction(db: sqlite3.Connection, transactional_id: str) -> TransactionRecord:
        row = db.execute("SELECT sequence, writers FROM transactional_ids WHERE id=?", (transactional_id,)).fetchone()
        return transactions.from_json(transactional_id, -1, "") if row is None else \
            transactions.from_json(transactional_id, row[0], row[1])

    @staticmethod
    def _store_transaction(db: sqlite3.Connection, record: TransactionRecord) -> None:
        db.execute(_STORE_TRANSACTION, (record.transactional_id, record.committed_sequence, SYSTEM_CLOCK.now_ms(),
                                        transactions.to_json(record)))

    def transaction_committed(self, txn: str) -> bool:
        transactional_id, sequence = validation.transaction(txn)
        row = self._db().execute("SELECT sequence FROM transactional_ids WHERE id=?", (transactional_id,)).fetchone()
        return row is not None and row[0] >= sequence

    def _migrate_transactions(self) -> None:
        """Fold the `transactions` table of a 0.1.0 database (a row per transaction) into transactional_ids."""
        exists = "SELECT 1 FROM sqlite_master WHERE type='table' AND name='transactions'"
        if self._db().execute(exists).fetchone() is None:
            return
        with self._tx() as db:
            if db.execute(exists).fetchone() is None:  # another process migrated it meanwhile
                return
            rows = db.execute("SELECT txn, commit_ms FROM transactions").fetchall()
            db.executemany(_UPSERT_TRANSACTION, [(*transaction_sequence(txn), ms) for txn, ms in rows])
            db.execute("DROP TABLE transactions")
        log.warning("%s: folded %d transaction rows of a 0.1.0 database into one record per transactional id",
                    self.path, len(rows))

    def close(self) -> None:
        """Close this thread's connection and the idle ones of this process."""
        lease: _Lease | None = getattr(self._local, "lease", None)
        if lease is not None:
            lease.close()
            self._local.lease = None
        pid, kept = os.getpid(), []
        while self._idle:
            try:
                db, owner, read_only = self._idle.pop()
            except IndexError:
                break
            if owner == pid:
                db.close()
            else:
                kept.append((db, owner, read_only))
        self._idle.extend(kept)

    # -- group membership: the GroupCoordinator state machine over the `groups` table -----------------
    def _partitions_of(self, topic: str) -> int:
        row = self._db().execute("SELECT partitions FROM topics WHERE name=?", (topic,)).fetchone()
        return row[0] if row else 0
