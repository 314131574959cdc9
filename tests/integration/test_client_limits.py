"""The limits a client counts on, over real processes (a coordinator and a data node refusing requests over
4 MiB, `limited_cluster`): servers refuse a request over socket.request.max.bytes as they read it, and a batch
over the topic's max.message.bytes, writing nothing; a producer sends a large table in appends that fit, all of
it; empty transactional and group instance ids are refused by the clients and by the servers; a send fails
within delivery_timeout_ms (plus one request_timeout_ms) when its leader or the coordinator does not answer.
(The same rules over an embedded fabric: tests/unit/clients/test_batch_splitting.py, test_send_timeouts.py.)"""
from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pytest

import fabric
from fabric.common.errors import (
    CoordinatorUnavailableError,
    FabricError,
    InvalidConfigError,
    InvalidGroupError,
    InvalidRequestError,
    RecordTooLargeError,
)
from fabric.common.records import to_storage
from fabric.common.types import JoinRequest
from fabric.common.waiting import wait_for
from fabric.server import wire
from fabric.server.connection import Call, put_call

LIMIT = 4 << 20  # the cluster's socket.request.max.bytes (conftest's LIMITED_REQUEST_BYTES)
MIB_RECORD = b"m" * (1 << 20)


def stored(values: list[bytes]) -> pa.RecordBatch:
    return to_storage(pa.table({"value": values}), None, 1_000_000).to_batches()[0]


def put(topic: str, batches: list[pa.RecordBatch], **fields: Any) -> Call:
    """A raw DoPut appending `batches` (one stream) to partition 0 of `topic`, as a hand-made client would."""
    descriptor = wire.put_descriptor("append", topic=topic, partition=0, codec="none", **fields)
    return put_call(descriptor, batches[0].schema, lambda: batches)


def ends(fab: fabric.Fabric, *topics: str) -> list[int]:
    return [fab.describe_topic(t).partitions[0].end_offset for t in topics]


def test_servers_refuse_a_request_over_socket_request_max_bytes_as_they_read_it(limited_cluster, raw) -> None:
    node, coordinator = limited_cluster.nodes[1].address, limited_cluster.coordinator.address
    big = {"max.message.bytes": str(64 << 20)}  # the topics take large batches: only the request is too large
    with fabric.connect(limited_cluster.url) as fab:
        fab.create_topic("wide", replication_factor=1, config=big)  # on the node
        fab.create_topic("local", config=big)  # in the coordinator's directory
        two_mib = stored([MIB_RECORD] * 2)
        with pytest.raises(RecordTooLargeError, match=f"over socket.request.max.bytes={LIMIT} of this server"):
            raw.call(node, put("wide", [two_mib] * 3, leader_epoch=0, acks="all", timeout_ms=8000))
        with pytest.raises(RecordTooLargeError, match=f"socket.request.max.bytes={LIMIT}.*nothing of it was written"):
            raw.call(coordinator, put("local", [two_mib] * 3))
        with pytest.raises(RecordTooLargeError, match=f"publish request is over socket.request.max.bytes={LIMIT}"):
            fab.cluster.publish("limits:1", {("local", 0): [two_mib] * 3})
        assert ends(fab, "wide", "local") == [0, 0]
        assert not fab.cluster.coordinator.transaction_committed("limits:1")
        assert raw.call(node, put("wide", [two_mib], leader_epoch=0, acks="all", timeout_ms=8000)) == 0
        with fab.producer() as producer:  # a producer's batches fit: each is one append
            landed = producer.send_batch("local", pa.table({"value": [MIB_RECORD] * 10}))
        assert sum(m.count for m in landed) == 10 and ends(fab, "wide", "local") == [2, 10]


def test_a_batch_over_max_message_bytes_is_refused_whole_and_a_producer_splits_its_own(limited_cluster,
                                                                                        raw) -> None:
    node = limited_cluster.nodes[1].address
    record = b"r" * 8192
    with fabric.connect(limited_cluster.url) as fab:
        fab.create_topic("capped", replication_factor=1, config={"max.message.bytes": "65536"})
        quoted = {"leader_epoch": 0, "acks": "all", "timeout_ms": 8000}
        with pytest.raises(RecordTooLargeError, match="a batch of 16 records of 131072 bytes exceeds "
                                                      "max.message.bytes=65536 of topic 'capped'"):
            raw.call(node, put("capped", [stored([record] * 16)], **quoted))
        with pytest.raises(RecordTooLargeError, match="a batch of 16 records .* max.message.bytes=65536"):
            raw.call(node, put("capped", [stored([record] * 8)] * 2, **quoted))  # one append, however streamed
        assert ends(fab, "capped") == [0]
        values = [b"%03d" % i + record[3:] for i in range(200)]
        with fab.producer() as producer:
            landed = producer.send_batch("capped", pa.table({"value": values}))
            futures = [producer.send("capped", v) for v in values[:20]]
        assert len(landed) == 25 and all(m.count == 8 for m in landed)
        assert [f.get(0).offset for f in futures] == list(range(200, 220))
        consumer = fab.consumer(auto_offset_reset="earliest")
        consumer.assign([("capped", 0)])
        read: list[bytes] = []
        wait_for(lambda: read.extend(r.value for r in consumer.poll(1)) or len(read) >= 220, 60, "every record")
        consumer.close()
        assert read == values + values[:20]


def test_empty_ids_are_refused_by_the_clients_and_by_the_servers(limited_cluster, raw) -> None:
    coordinator, node = limited_cluster.coordinator.address, limited_cluster.nodes[1].address
    with fabric.connect(limited_cluster.url) as fab:
        fab.create_topic("ids", replication_factor=1)
        with pytest.raises(InvalidConfigError, match="'transactional_id': must not be empty; leave it out"):
            fab.producer(transactional_id="")
        with pytest.raises(InvalidConfigError, match="'group_instance_id': must not be empty; leave it out"):
            fab.consumer("ids", group_id="readers", group_instance_id="")
        with pytest.raises(InvalidGroupError, match="must be a non-empty string.*leave group_id out"):
            fab.consumer("ids", group_id="")
        with fab.producer(transactional_id=None) as unset:  # kafka-python's default: no transactions
            assert unset.send("ids", b"x").get(30).offset == 0
    with pytest.raises(InvalidRequestError, match="a transactional id must be a string of 1"):
        raw.action(coordinator, "transaction_record", transactional_id="")
    with pytest.raises(InvalidRequestError, match="transactional_id must be a non-empty string"):
        raw.action(node, "write_markers", topic="ids", partition=0, transactional_id="", commit=[], abort=[[1, 0]],
                   timeout_ms=1000, leader_epoch=0)
    with pytest.raises(InvalidGroupError, match="must be a non-empty string"):
        raw.action(coordinator, "join_group", request=JoinRequest("", "", ("ids",)))


def test_a_send_fails_within_its_timeouts_when_its_leader_or_the_coordinator_does_not_answer(limited_cluster
                                                                                            ) -> None:
    """Last in the module: it pauses the node, then the coordinator, and waits for the node to be back."""
    delivery_s, request_s, slack_s = 5, 2, 10  # slack: what a loaded machine may add (a silent call cost 30 s)
    timeouts = {"delivery_timeout_ms": delivery_s * 1000, "request_timeout_ms": request_s * 1000,
                "linger_ms": 0, "retry_backoff_ms": 100}
    node, coordinator = limited_cluster.nodes[1], limited_cluster.coordinator
    with fabric.connect(limited_cluster.url) as fab:
        fab.create_topic("silent", replication_factor=1)
        with fab.producer() as warm:  # the first batch's set-up (imports, a producer id) may be slow under load
            assert warm.send("silent", b"before").get(60).offset == 0
        with fab.producer(**timeouts) as producer:
            assert producer.send("silent", b"also before").get(60).offset == 1
            node.pause()
            try:
                began = time.monotonic()
                with pytest.raises(FabricError) as failed:
                    producer.send("silent", b"to a paused leader").get(120)
                to_leader = time.monotonic() - began
            finally:
                node.resume()
        assert to_leader < delivery_s + request_s + slack_s, f"the send failed after {to_leader:.1f} s"
        assert failed.value.retriable and f"delivery_timeout_ms={delivery_s * 1000} passed" in str(failed.value)
        coordinator.pause()
        try:
            began = time.monotonic()
            with fab.producer(**timeouts) as fresh, pytest.raises(CoordinatorUnavailableError):
                fresh.send("silent", b"no metadata yet")  # send() asks the coordinator about the topic
            to_coordinator = time.monotonic() - began
        finally:
            coordinator.resume()
        assert to_coordinator < request_s + slack_s, f"send() failed after {to_coordinator:.1f} s"
        wait_for(lambda: all(n.alive for n in fab.list_nodes())
                 and fab.describe_topic("silent").partitions[0].leader == 1, 120, "the node to be back")
