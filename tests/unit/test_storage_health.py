"""The health of a data node's replicas (fabric/server/node/storage_health.py) over real directories: a storage
failure takes a replica offline once (one log line, a retriable error naming the node and the partition, writes
refused without touching the disk), a probe brings it back once its storage takes writes again, and a replica
whose directory is gone stays offline until the node restarts. (Full and read-only disks on real node processes:
tests/integration/test_replica_storage.py.)"""
from __future__ import annotations

import errno
import logging
import shutil

import pytest

from fabric.common.errors import KafkaStorageError, NotLeaderError, StorageError
from fabric.common.types import LeaderAndIsr, NodeAssignment, PartitionAssignment, PartitionRegistration, TopicInfo
from fabric.server import wire
from fabric.server.node.replica_manager import ReplicaManager
from fabric.server.node.storage_health import Health, StorageHealth

TP = ("t", 0)


@pytest.fixture
def health(tmp_path) -> StorageHealth:
    (tmp_path / "t" / "0").mkdir(parents=True)
    return StorageHealth(3, lambda tp: str(tmp_path / tp[0] / str(tp[1])))


def test_a_storage_failure_takes_a_replica_offline_once_and_a_probe_brings_it_back(health, tmp_path,
                                                                                   caplog) -> None:
    changes = []
    health.on_change = lambda tp, condition: changes.append((tp, condition.health))
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "t" / "0" / "00.arrows"))
    with caplog.at_level(logging.INFO, logger="fabric.server.node.storage_health"):
        for _ in range(3):
            error = health.failed(TP, full, "append to partition t-0")
            assert isinstance(error, KafkaStorageError) and isinstance(error, NotLeaderError) and error.retriable
            assert "node 3 cannot append to partition t-0" in str(error) and "the disk is full" in str(error)
        with pytest.raises(KafkaStorageError, match="node 3 cannot write partition t-0"):
            with health.writing(TP, "write partition t-0"):
                pytest.fail("an offline replica's write must not reach the disk")
        assert health.unhealthy() == [TP] and changes == [(TP, Health.OFFLINE)]
        assert [r.levelname for r in caplog.records] == ["WARNING"]  # once, however many requests fail
        health.probe()  # the directory takes writes again
    assert health.unhealthy() == [] and changes == [(TP, Health.OFFLINE), (TP, Health.HEALTHY)]
    assert "replica t-0 is healthy (was offline: the disk is full" in caplog.records[-1].message
    assert not list((tmp_path / "t" / "0").iterdir())  # the probe leaves nothing behind


def test_only_storage_failures_take_a_replica_offline(health, tmp_path) -> None:
    assert health.failed(TP, ValueError("a bug"), "read partition t-0") is None
    assert health.failed(TP, FileNotFoundError(errno.ENOENT, "a segment replaced under a reader"), "read") is None
    assert health.failed(TP, StorageError("cannot write: the filesystem is read-only"), "append") is not None
    with pytest.raises(ValueError):
        with health.guard(("t", 1), "read partition t-1"):
            raise ValueError("passes through unchanged")
    assert health.unhealthy() == [TP]


def test_a_replica_whose_directory_is_gone_stays_offline_until_the_node_restarts(health, tmp_path) -> None:
    shutil.rmtree(tmp_path / "t")
    error = health.failed(TP, FileNotFoundError(errno.ENOENT, "gone"), "read partition t-0")
    assert error is not None and "is gone" in str(error)
    (tmp_path / "t" / "0").mkdir(parents=True)  # even once something creates it again: its records are gone
    health.probe()
    assert health.unhealthy() == [TP]


def view(leader: int) -> NodeAssignment:
    registration = PartitionRegistration(PartitionAssignment((1, 2)), LeaderAndIsr(leader, 0, (leader,), 0, 1))
    return NodeAssignment(1, {TP: registration}, {"t": TopicInfo("t", 1)})


def test_a_leader_whose_partition_directory_is_deleted_answers_a_retriable_error_and_reports_it(
        tmp_path, storage, caplog) -> None:
    replicas = ReplicaManager(1, str(tmp_path / "node1"))
    reports = []
    replicas.report = lambda: reports.append(replicas.health.unhealthy())
    replicas.apply(view(1))
    assert replicas.append("t", 0, storage.make_batch([b"a"])) == 0
    shutil.rmtree(tmp_path / "node1" / "t" / "0")
    with caplog.at_level(logging.INFO):
        for call in (lambda: replicas.append("t", 0, storage.make_batch([b"b"])),
                     lambda: replicas.fetch("t", 0, 0, 1 << 20), lambda: replicas.partition_state("t", 0)):
            with pytest.raises(KafkaStorageError, match="node 1 cannot .* partition t-0: its replica of t-0 is "
                                                        "offline .*is gone"):
                call()
        for _ in range(4):
            replicas.maintain()  # no checkpoint, no warning per round
    assert reports == [[TP]]
    assert [r.message for r in caplog.records if r.levelno >= logging.WARNING] == [
        f"node 1: replica t-0 is offline: its directory {tmp_path / 'node1' / 't' / '0'} is gone; the controller "
        "moves its leadership and ISR membership to other replicas (its directory is gone: restart the node to copy "
        "it again)"]
    [described] = replicas.describe()
    assert (described["health"], described["role"], "log_end" in described) == ("Offline", "Leader", False)
    assert replicas.maintained_partitions() == []
    restarted = ReplicaManager(1, str(tmp_path / "node1"))  # a restart starts it empty; it copies it again
    restarted.apply(view(2))
    assert restarted.health.unhealthy() == [] and restarted.describe()[0]["log_end"] == 0


def test_an_unexpected_failure_names_the_server_that_failed() -> None:
    """A node's failure was sent as "coordinator failed: ...", though no coordinator was involved."""
    sent = wire.to_flight_error(RuntimeError("a bug"), "node 3")
    assert str(sent).startswith("node 3 failed: RuntimeError: a bug")
    assert str(wire.to_flight_error(RuntimeError("a bug"))).startswith("coordinator failed: RuntimeError")
