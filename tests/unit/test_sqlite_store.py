"""The SQLite coordinator store's own behaviour beyond the Coordinator contract (which
tests/integration/test_coordinator_contract.py runs against every store): transactions recorded by 0.1.0, and
a database from before the replicated cluster, connections pooled across threads that come and go, a new database
opened while another connection holds it, an older one upgraded by two processes at once, group states kept for
commits' checks."""
from __future__ import annotations

import os
import sqlite3
import threading

import pytest

from fabric.common.errors import UnknownMemberError
from fabric.common.types import CommittedOffset, JoinRequest, LeaderAndIsr, PartitionAssignment, PartitionRegistration
from fabric.common.waiting import wait_for
from fabric.coordinator import group_store, sqlite_replicas, sqlite_store
from fabric.coordinator.sqlite_store import SqliteCoordinator


def test_sqlite_store_folds_0_1_0_transactions_into_one_row_per_id(tmp_path):
    path = str(tmp_path / "m.db")
    with sqlite3.connect(path) as db:  # a 0.1.0 database: a row per transaction
        db.execute("CREATE TABLE transactions (txn TEXT PRIMARY KEY, commit_ms INTEGER NOT NULL)")
        db.executemany("INSERT INTO transactions VALUES (?, 1)", [("query-a:0",), ("query-a:7",), ("job-x",)])
    store = SqliteCoordinator(path)
    try:
        assert [store.transaction_committed(t) for t in ("query-a:7", "query-a:8", "job-x")] == [True, False, True]
        store.commit_transaction("query-a:8")
        rows = store._db().execute("SELECT id, sequence FROM transactional_ids ORDER BY id").fetchall()
        assert rows == [("job-x", 0), ("query-a", 8)]
        assert store._db().execute("SELECT name FROM sqlite_master WHERE name='transactions'").fetchone() is None
    finally:
        store.close()


def test_a_new_database_another_connection_is_writing_is_opened_once_it_is_free(tmp_path, monkeypatch):
    """Processes opening a new fabric together (its first CLI commands, run side by side): while one creates the
    tables, SQLite refuses another's switch to write-ahead logging at once ("database is locked", without waiting
    its busy timeout). The opener tries again, and opens the database once the other is done."""
    path = str(tmp_path / "m.db")
    writer = sqlite3.connect(path, isolation_level=None)  # another process creating the database's tables
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("CREATE TABLE another (x)")
    tried_again = threading.Event()

    def backoff(attempt: int) -> None:
        tried_again.set()
        group_store.conflict_backoff(attempt)
    monkeypatch.setattr(sqlite_store, "conflict_backoff", backoff, raising=False)
    opened: dict[str, object] = {}

    def open_store() -> None:
        try:
            opened["store"] = SqliteCoordinator(path)
        except Exception as exc:  # noqa: BLE001 (the test's assertion names it)
            opened["error"] = exc
    opener = threading.Thread(target=open_store)
    opener.start()
    wait_for(lambda: tried_again.is_set() or not opener.is_alive(), 60, "the opener to find the database locked")
    writer.execute("COMMIT")
    opener.join(120)
    assert "error" not in opened and isinstance(opened.get("store"), SqliteCoordinator), opened
    store = opened["store"]
    assert isinstance(store, SqliteCoordinator)
    try:
        assert store._db().execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert store.list_topics() == []
    finally:
        store.close()
        writer.close()


def test_a_column_another_process_adds_first_while_both_upgrade_the_database_is_kept(tmp_path) -> None:
    """Two processes opening a database of an older version at once both find a column missing; the one whose
    ALTER comes second finds it added, and goes on."""
    path = str(tmp_path / "m.db")
    with sqlite3.connect(path) as db:  # the topics table as it was before topic ids
        db.execute("CREATE TABLE topics (name TEXT PRIMARY KEY, partitions INTEGER NOT NULL, config TEXT NOT NULL, "
                   "value_schema BLOB)")
    mine, another = (sqlite3.connect(path, isolation_level=None) for _ in range(2))
    mine.executescript(sqlite_store._SCHEMA + sqlite_replicas.SCHEMA)

    class Racing:
        """`mine`, with the other process adding topics.topic_id right after this one first looked for it."""

        raced = False

        def execute(self, sql: str, *args: object) -> list[tuple]:
            rows = mine.execute(sql, *args).fetchall()
            if sql == "PRAGMA table_info(topics)" and not self.raced:
                self.raced = True
                another.execute("ALTER TABLE topics ADD COLUMN topic_id TEXT NOT NULL DEFAULT ''")
            return rows

        def commit(self) -> None:
            mine.commit()
    racing = Racing()
    sqlite_store._migrate(racing)  # (a connection, as far as _migrate looks)
    assert racing.raced
    for table, column, _ in sqlite_store.MIGRATIONS:
        assert column in {row[1] for row in mine.execute(f"PRAGMA table_info({table})")}
    mine.close()
    another.close()


def test_a_database_from_before_replication_keeps_its_topics_and_gains_the_tables(tmp_path):
    path = str(tmp_path / "m.db")
    with sqlite3.connect(path) as db:  # the tables as they were before the replicated cluster
        db.execute("CREATE TABLE topics (name TEXT PRIMARY KEY, partitions INTEGER NOT NULL, config TEXT NOT NULL, "
                   "value_schema BLOB)")
        db.execute("INSERT INTO topics VALUES ('old', 2, '{}', NULL)")
    store = SqliteCoordinator(path)
    try:
        assert store.topic("old").partitions == 2 and store.set_partitions("old", 3).partitions == 3
        assert store.partition_registrations() == {} and store.registered_nodes() == []
        assert store.controller_epoch() == 0 and store.claim_controller_epoch() == 1
    finally:
        store.close()


def test_offsets_an_earlier_version_kept_in_its_table_move_to_the_offsets_topic_once(tmp_path) -> None:
    path = str(tmp_path / "__fabric" / "metadata.db")
    os.makedirs(os.path.dirname(path))
    old = sqlite3.connect(path)
    old.executescript("CREATE TABLE offsets (grp TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL, "
                      "next_offset INTEGER NOT NULL, metadata TEXT NOT NULL, commit_ms INTEGER NOT NULL, "
                      "PRIMARY KEY (grp, topic, partition));"
                      "INSERT INTO offsets VALUES ('g', 'clicks', 0, 12, 'm', 5), ('g', 'clicks', 1, 3, '', 6);")
    old.commit()
    old.close()
    store = SqliteCoordinator(path)
    assert store.committed("g") == {("clicks", 0): CommittedOffset(12, "m", 5),
                                    ("clicks", 1): CommittedOffset(3, "", 6)}
    assert os.path.isdir(tmp_path / "__fabric" / "__consumer_offsets")
    store.commit_offsets("g", {("clicks", 0): 13})
    store.close()
    again = SqliteCoordinator(path)  # migrated once: the newer commit stays
    assert again.committed("g")[("clicks", 0)].offset == 13 and again.list_groups() == ["g"]
    again.close()


def test_threads_that_come_and_go_reuse_a_connection_and_concurrent_ones_get_their_own(tmp_path) -> None:
    """A Flight server's handler threads get fresh thread locals on every call: their connections go back to a
    pool, not one opened per call; two threads at once never share one."""
    store = SqliteCoordinator(str(tmp_path / "m.db"))
    try:
        store.create_topic("t", 2, {}, None)
        used: list[sqlite3.Connection] = []

        def call() -> None:
            used.append(store._db())
            assert store.topic("t").partitions == 2
        for _ in range(20):
            thread = threading.Thread(target=call)
            thread.start()
            thread.join()
        assert len({id(db) for db in used}) == 1
        together, barrier = [], threading.Barrier(2)

        def hold() -> None:
            together.append(store._db())
            barrier.wait(30)  # both threads hold theirs now
            assert store.topic("t").partitions == 2
        threads = [threading.Thread(target=hold) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len({id(db) for db in together}) == 2
    finally:
        store.close()


def test_topic_metadata_read_during_another_writers_transaction_is_not_kept_once_it_commits(tmp_path):
    """A reader whose metadata version changed reads the database again; while a writer's transaction is in flight
    (its new version written, its change not committed) what the reader reads is the old metadata, which it must
    not keep under the new version: once the writer commits, the reader's next call sees the change."""
    path = str(tmp_path / "m.db")
    writer, reader = SqliteCoordinator(path), SqliteCoordinator(path)  # two connections, as two processes
    try:
        writer.create_topic("t", 1, {}, None)
        assert reader.topic("t").config == {}
        with writer._tx() as db:
            db.execute("""UPDATE topics SET config='{"retention.ms": "5"}' WHERE name='t'""")
            assert reader.topic("t").config == {}  # not committed yet
            assert writer.topic("t").config == {"retention.ms": "5"}  # (the writer's own read does not wait)
        assert reader.topic("t").config == {"retention.ms": "5"}
        assert reader.topic("t") is reader.topic("t")  # kept, now that no write is in flight
        writer.alter_topic_config("t", {"retention.ms": "6"})
        assert reader.topic("t").config == {"retention.ms": "6"}
    finally:
        writer.close()
        reader.close()


def test_whether_a_topic_is_replicated_is_read_again_once_another_writer_changes_the_metadata(tmp_path):
    """`replicated` is cached under the metadata version, as topic() is: a topic another process creates
    replicated, or deletes, is seen as such on the next call."""
    path = str(tmp_path / "m.db")
    writer, reader = SqliteCoordinator(path), SqliteCoordinator(path)  # two connections, as two processes
    try:
        assert not reader.replicated("r") and not reader.replicated("r")
        for node_id in (1, 2):
            writer.register_node(node_id, f"h{node_id}:9092", directory_id=f"d{node_id}")
        state = LeaderAndIsr(1, 0, (1, 2), 0, 0)
        writer.create_replicated_topic("r", {}, None, {0: PartitionRegistration(PartitionAssignment((1, 2)), state)})
        assert reader.replicated("r") and reader.replicated("r")
        writer.delete_topic("r")
        assert not reader.replicated("r")
    finally:
        writer.close()
        reader.close()


def test_every_partition_registration_is_read_again_once_another_writer_changes_the_metadata(tmp_path):
    """partition_registrations() (the controller answers every node's heartbeat from it) is kept under the
    metadata version, as topic() is: the same registrations while nothing was written, and another process's ISR
    change or deletion seen on the next call."""
    path = str(tmp_path / "m.db")
    writer, reader = SqliteCoordinator(path), SqliteCoordinator(path)  # two connections, as two processes
    try:
        state = LeaderAndIsr(1, 0, (1, 2), 0, 0)
        writer.create_replicated_topic("r", {}, None, {0: PartitionRegistration(PartitionAssignment((1, 2)), state)})
        first = reader.partition_registrations()
        assert first[("r", 0)].state == state
        again = reader.partition_registrations()
        assert again == first and again[("r", 0)] is first[("r", 0)]  # kept, not read again
        assert writer.update_partition_states({("r", 0): (0, LeaderAndIsr(1, 0, (1,), 1, 0))})
        assert reader.partition_registrations()[("r", 0)].state.isr == (1,)
        writer.delete_topic("r")
        assert reader.partition_registrations() == {}
    finally:
        writer.close()
        reader.close()


@pytest.fixture
def group_reads(monkeypatch) -> list[str]:
    """The names of the groups whose row is read from now on, in order."""
    reads: list[str] = []
    read = group_store._read

    def counted(db, group):
        reads.append(group)
        return read(db, group)
    monkeypatch.setattr(group_store, "_read", counted)
    return reads


def test_a_groups_state_is_kept_for_commit_checks_until_another_writer_changes_the_database(tmp_path, group_reads):
    """A commit's generation check reads the group's state once, then keeps it under the metadata version: the
    next checks read no row. A member another process joins is seen by the next check (a commit without a
    generation refused), and so is its leaving."""
    path = str(tmp_path / "m.db")
    writer, reader = SqliteCoordinator(path), SqliteCoordinator(path)  # two connections, as two processes
    try:
        for _ in range(3):
            reader.check_commit("g")  # no members: a commit without a generation may be stored
        assert group_reads == ["g"]
        joined = writer.join_group(JoinRequest("g", "", ("t",)))
        with pytest.raises(UnknownMemberError, match="live member"):
            reader.check_commit("g")
        assert joined.ready
        writer.sync_group("g", joined.member_id, joined.generation)
        reader.check_commit("g", joined.member_id, joined.generation)
        writer.leave_group("g", joined.member_id)
        reader.check_commit("g")
    finally:
        writer.close()
        reader.close()


def test_kept_group_states_are_bounded_and_what_was_dropped_is_read_again(tmp_path, monkeypatch, group_reads):
    """A cache by metadata version holds at most MAX_CACHED_NAMES names (any group name may be asked): past it
    the cache is emptied, so a state asked for after is read again, and the latest kept."""
    monkeypatch.setattr(sqlite_store, "MAX_CACHED_NAMES", 4)
    coordinator = SqliteCoordinator(str(tmp_path / "m.db"))
    try:
        names = [f"g{i}" for i in range(10)]
        for name in names:
            coordinator.check_commit(name)
        assert group_reads == names
        coordinator.check_commit("g9")  # kept
        assert group_reads == names
        coordinator.check_commit("g0")  # dropped when the cache filled up: read again
        assert group_reads == [*names, "g0"]
    finally:
        coordinator.close()


def test_a_removed_metadata_version_file_is_noticed_and_what_was_kept_is_read_again(tmp_path):
    """An operator removing the metadata version file while processes run: a writer makes a new one, which the
    reader's map of the old never shows. The reader looks at the file every RECHECK_S and maps the new one: what
    it kept (a topic's metadata, a group's state) is read again, not trusted forever."""
    path = str(tmp_path / "m.db")
    writer, reader = SqliteCoordinator(path), SqliteCoordinator(path)  # two connections, as two processes
    try:
        writer.create_topic("t", 1, {}, None)
        assert reader.topic("t").config == {}
        reader.check_commit("g")  # the group's (empty) state kept
        os.unlink(f"{path}-version")
        assert reader.topic("t").config == {}  # read with the file gone: no error
        joined = writer.join_group(JoinRequest("g", "", ("t",)))
        writer.alter_topic_config("t", {"retention.ms": "6"})
        wait_for(lambda: reader.topic("t").config == {"retention.ms": "6"}, 30, "the reader to see the change")
        with pytest.raises(UnknownMemberError):
            reader.check_commit("g")
        assert joined.member_id
    finally:
        writer.close()
        reader.close()
