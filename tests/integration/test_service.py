"""The coordinator service against real `python -m fabric.server.service` processes: the client API over
fabric://, errors keeping their type, token authentication, ACLs, TLS and failover between instances. (The
Coordinator contract over fabric://: test_coordinator_contract.py; the security files and the shipped config
alone: tests/unit/test_security.py.)"""
from __future__ import annotations

import argparse
import threading

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import fabric
from fabric.cli import coordinator as coordinator_command
from fabric.common.errors import (
    AuthenticationError,
    AuthorizationError,
    CoordinatorUnavailableError,
    InvalidPartitionsError,
    TopicExistsError,
    UnknownPartitionError,
    UnknownTopicError,
)
from fabric.common.records import to_storage
from fabric.common.waiting import wait_for
from fabric.server import wire

ADMIN, APP = "admin-secret", "app-secret"


def produce(fab, topic: str, n: int) -> None:
    with fab.producer() as producer:
        futures = [producer.send(topic, f"v{i}".encode(), key=str(i).encode()) for i in range(n)]
        producer.flush()
        assert all(f.result().topic == topic for f in futures)


def test_client_api_over_fabric_url(coordinators, tmp_path, drain) -> None:
    instance = coordinators()
    with fabric.connect(instance.url()) as fab:
        fab.create_topic("orders", partitions=2, config={"retention.ms": "3600000"})
        fab.create_topic("typed", schema=pa.schema([("user", pa.string()), ("amount", pa.int64())]))
        assert fab.list_topics() == ["orders", "typed"]
        produce(fab, "orders", 20)
        consumer = fab.consumer("orders", group_id="billing", **{"auto.offset.reset": "earliest"})
        records = drain(consumer, 20)
        assert sorted(r.value for r in records) == sorted(f"v{i}".encode() for i in range(20))
        consumer.commit()
        consumer.close()
        described = fab.describe_topic("orders")
        assert sum(p.end_offset for p in described.partitions) == 20
        assert described.overrides == {"retention.ms": "3600000"}
        assert fab.describe_topic("typed").value_schema.names == ["user", "amount"]
        assert fab.list_groups() == ["billing"]
        assert [(g.committed, g.lag) for g in fab.describe_group("billing")] == [
            (p.end_offset, 0) for p in described.partitions]
        # publish: atomic over partitions, at most once per transaction id
        rows = to_storage(pa.table({"value": [b"a", b"b"]}), None, 1_000_000)
        parts = {("orders", 0): rows.to_batches(), ("orders", 1): []}
        assert fab.cluster.publish("txn-1", parts) is True
        assert fab.cluster.publish("txn-1", parts) is False
        assert fab.cluster.coordinator.transaction_committed("txn-1")
        end = described.partitions[0].end_offset
        fetched = fab.cluster.fetch("orders", 0, end, 1 << 20)
        assert [f.batch.column("value").to_pylist() for f in fetched] == [[b"a", b"b"]]
        assert fab.cluster.fetch("orders", 0, end + 2, 1 << 20) == []
        header, payload = fab.cluster.frame_encoder("orders").encode(rows.to_batches()[0])  # the Spark sink's path
        staged = pa.py_buffer(header + payload.to_pybytes())
        assert fab.cluster.publish_frames("txn-2", {("orders", 1): [staged]}) is True
        assert fab.cluster.publish_frames("txn-2", {("orders", 1): [staged]}) is False
        end1 = described.partitions[1].end_offset
        assert [f.batch.column("value").to_pylist() for f in fab.cluster.fetch("orders", 1, end1, 1 << 20)] == [
            [b"a", b"b"]]
    # the default store is the data directory's own database: an embedded client sees the same fabric
    with fabric.connect(f"file://{instance.data_dir}") as local:
        assert local.list_topics() == ["orders", "typed"]
        assert local.describe_topic("orders").partitions[0].end_offset == end + 2


def test_the_service_expires_and_compacts_idle_topics_in_the_background(coordinators) -> None:
    instance = coordinators(extra=("--log-retention-check-interval-ms", "100"))
    with fabric.connect(instance.url()) as fab:
        fab.create_topic("idle", 2, config={"retention.ms": "60000"})
        fab.create_topic("table", config={"cleanup.policy": "compact", "segment.bytes": "1200",
                                          "max.compaction.lag.ms": "1"})
        with fab.producer(batch_size=1, linger_ms=0) as producer:
            for i in range(6):
                producer.send("idle", b"v%d" % i, key=b"%d" % i, timestamp=1_000_000)  # CreateTime in 1970
            for i in range(40):
                producer.send("table", b"v%d" % i, key=b"k%d" % (i % 4))
        # nothing is written any more: the service's maintenance thread alone expires and compacts them
        wait_for(lambda: all(p.start_offset == p.end_offset for p in fab.describe_topic("idle").partitions),
                 what="the idle topic to expire")
        assert sum(p.end_offset for p in fab.describe_topic("idle").partitions) == 6

        def table() -> dict[int, tuple[bytes, bytes]]:
            rows = [(f.offset + i, r) for f in fab.cluster.fetch("table", 0, 0, 1 << 20)
                    for i, r in enumerate(f.batch.select(["key", "value"]).to_pylist())]
            return {offset: (r["key"], r["value"]) for offset, r in rows}

        latest = wait_for(lambda: rows if len(rows := table()) == 4 else None, what="the idle table to be compacted")
        assert latest == {36 + k: (b"k%d" % k, b"v%d" % (36 + k)) for k in range(4)}  # offsets keep their values
    def log() -> str:  # what the thread did, at INFO (the cleaner logs once its swap is visible, so may be late)
        with open(instance.log_path) as f:
            return f.read()
    wait_for(lambda: "INFO fabric.storage.cleaner: table-0: compacted offsets below" in log(),
             what="the cleaner to log its pass")
    assert "INFO fabric.storage.log_maintenance: idle-0: retention deleted" in log(), log()
    assert "INFO fabric.storage.cleaner: table-0: compacted offsets below" in log(), log()


def test_errors_cross_the_wire_with_their_type(coordinators) -> None:
    instance = coordinators()
    with fabric.connect(instance.url()) as remote, fabric.connect(f"file://{instance.data_dir}") as local:
        remote.create_topic("t", partitions=2)
        for call, error in [(lambda f: f.create_topic("t"), TopicExistsError),
                            (lambda f: f.describe_topic("missing"), UnknownTopicError),
                            (lambda f: f.cluster.coordinator.set_partitions("t", 1), InvalidPartitionsError),
                            (lambda f: f.cluster.fetch("t", 7, 0, 100), UnknownPartitionError)]:
            with pytest.raises(error) as over_wire:
                call(remote)
            with pytest.raises(error) as embedded:
                call(local)
            assert str(over_wire.value) == str(embedded.value)


@pytest.fixture
def secured(coordinators, tmp_path):
    """An instance with tokens (admin, app) and ACLs: app may only describe, read and write topic:orders."""
    (tmp_path / "tokens").write_text(f"# token principal\n{ADMIN} admin\n{APP} app\n")
    (tmp_path / "acls").write_text("admin admin topic:*\nadmin admin group:*\n"
                                   "app describe topic:orders\napp read topic:orders\napp write topic:orders\n")
    instance = coordinators(extra=("--tokens-file", str(tmp_path / "tokens"), "--acl-file", str(tmp_path / "acls")))
    with fabric.connect(instance.url(f"token={ADMIN}")) as admin:
        admin.create_topic("orders")
        admin.create_topic("private")
    return instance


def test_authentication_is_required_on_every_endpoint(secured, monkeypatch) -> None:
    monkeypatch.delenv("FABRIC_TOKEN", raising=False)
    rows = to_storage(pa.table({"value": [b"x"]}), None, 1_000_000).to_batches()[0]
    for query in ("", "token=wrong"):
        with fabric.connect(secured.url(query)) as fab:
            for call in (fab.list_topics, lambda: fab.create_topic("new"),
                         lambda: fab.cluster.fetch("orders", 0, 0, 100), lambda: fab.cluster.append("orders", 0, rows)):
                with pytest.raises(AuthenticationError):
                    call()
    monkeypatch.setenv("FABRIC_TOKEN", ADMIN)  # the environment supplies the token when the URL has none
    with fabric.connect(secured.url()) as fab:
        assert fab.list_topics() == ["orders", "private"]


def test_acls_deny_and_change_nothing(secured) -> None:
    with fabric.connect(secured.url(f"token={APP}")) as app, fabric.connect(secured.url(f"token={ADMIN}")) as admin:
        produce(app, "orders", 3)  # granted: write, read and describe on topic:orders
        assert app.list_topics() == ["orders"]  # listings show only what the principal may describe
        rows = to_storage(pa.table({"value": [b"x"]}), None, 1_000_000).to_batches()[0]
        for call in (lambda: app.create_topic("new"), lambda: app.delete_topic("orders"),
                     lambda: app.cluster.append("private", 0, rows), lambda: app.cluster.fetch("private", 0, 0, 100),
                     lambda: app.alter_topic_config("orders", {"retention.ms": "1000"}),
                     lambda: app.cluster.coordinator.commit_offsets("billing", {("orders", 0): 1})):
            with pytest.raises(AuthorizationError, match="principal 'app' is not allowed"):
                call()
        assert admin.list_topics() == ["orders", "private"]
        assert admin.describe_topic("private").partitions[0].end_offset == 0
        assert admin.describe_topic("orders").overrides == {}
        assert admin.list_groups() == []


def test_tls_round_trip(coordinators, tls_files, drain) -> None:
    cert, key = tls_files
    instance = coordinators(tls=(cert, key))
    with fabric.connect(instance.url(f"ca={cert}")) as fab:
        fab.create_topic("secure")
        produce(fab, "secure", 5)
        consumer = fab.consumer("secure", **{"auto.offset.reset": "earliest"})
        assert sorted(r.value for r in drain(consumer, 5)) == [f"v{i}".encode() for i in range(5)]
        consumer.close()
    with fabric.connect(f"fabric://{instance.address}?timeout_ms=1500") as plaintext:
        with pytest.raises(CoordinatorUnavailableError):
            plaintext.list_topics()


def test_client_fails_over_past_a_dead_instance(coordinators, tmp_path, capsys) -> None:
    data, store = str(tmp_path / "data"), f"sqlite://{tmp_path}/meta/metadata.db"
    first, second = coordinators(data, store=store), coordinators(data, store=store)
    with fabric.connect(first.url()) as fab:
        fab.create_topic("orders", partitions=2)
        produce(fab, "orders", 4)
    first.kill()
    with fabric.connect(f"fabric://{first.address},{second.address}") as fab:
        produce(fab, "orders", 4)
        assert sum(p.end_offset for p in fab.describe_topic("orders").partitions) == 8
        statuses = fab.cluster.statuses()
        assert isinstance(statuses[first.address], CoordinatorUnavailableError)
        assert statuses[second.address].active and statuses[second.address].active_instance == second.address
    assert coordinator_command.status(argparse.Namespace(url=f"fabric://{first.address},{second.address}")) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["INSTANCE", "STATE", "EPOCH"]
    assert [row.split()[:2] for row in table[1:]] == [[first.address, "unreachable"], [second.address, "active"]]
    with fabric.connect(f"fabric://{first.address}?timeout_ms=500") as dead:
        with pytest.raises(CoordinatorUnavailableError, match="no active coordinator answered"):
            dead.list_topics()


@pytest.mark.zookeeper
def test_ha_failover_on_zookeeper_loses_no_committed_offset(zookeeper_instances, the_active) -> None:
    instances, url = zookeeper_instances(2000)
    acked: dict[int, int] = {0: 0, 1: 0}
    failures: list[BaseException] = []
    stop = threading.Event()

    def consume(partition: int) -> None:
        """Poll one partition and commit after every non-empty poll; acked = the last acknowledged commit."""
        try:
            with fabric.connect(url) as own:
                consumer = own.consumer(group_id="billing", **{"auto.offset.reset": "earliest"})
                consumer.assign([("orders", partition)])
                while not stop.is_set():
                    if consumer.poll(0.2):
                        consumer.commit()
                        acked[partition] = consumer.position("orders", partition)
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            failures.append(exc)

    with fabric.connect(url) as fab:
        first = wait_for(lambda: the_active(fab), 30, "one active instance")
        standby = next(address for address in instances if address != first.instance)
        with flight.connect(f"grpc://{standby}") as raw, pytest.raises(
                flight.FlightUnavailableError, match=f"not the active coordinator, active is {first.instance}"):
            list(raw.do_action(wire.action("delete_group", group="billing")))
        with fabric.connect(f"fabric://{standby}") as redirected:  # follows the standby's answer to the active
            redirected.create_topic("orders", partitions=2)
        produce(fab, "orders", 40)
        threads = [threading.Thread(target=consume, args=(p,), daemon=True) for p in (0, 1)]
        for thread in threads:
            thread.start()
        try:
            wait_for(lambda: min(acked.values()) > 0 or failures, 30, "commits before the failover")
            instances[first.instance].kill()
            second = wait_for(lambda: (s := the_active(fab)) and s.instance != first.instance and s, 30,
                              "another instance to take over")
            assert second.epoch > first.epoch
            produce(fab, "orders", 40)  # through the failover client list
            ends = {p: fab.cluster.partition_state("orders", p).end_offset for p in (0, 1)}
            assert sum(ends.values()) == 80
            wait_for(lambda: acked == ends or failures, 60, "every record consumed and committed")
        finally:  # the consumers stop with the test, however it ends
            stop.set()
            for thread in threads:
                thread.join()
        assert not failures, failures
        committed = fab.cluster.coordinator.committed("billing")
        assert {p: committed[("orders", p)].offset for p in (0, 1)} == acked == ends
