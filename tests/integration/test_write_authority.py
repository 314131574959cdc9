"""No principal can corrupt another's writes on a secured cluster (real coordinator and node processes, tokens and
ACLs), through raw Flight calls to the leader as a hostile client sends them:
- producer ids belong to whoever got them: appends under another principal's ids, or under ids nobody was handed
  (the "next" ones), are refused, so they never swallow a later producer's acknowledged records;
- transactional appends are verified (KIP-890): only with write on the transactional id, and only for a
  producer id and epoch the coordinator registered with the partition in an open transaction, so nothing the
  coordinator does not know holds the last stable offset back;
- a hanging transaction written before leaders verified them (frames put straight into the replica's log) is
  listed by `fabric transactions find-hanging` and cleared by `abort --start-offset`;
- a node's status shows a principal the configs of the topics it may describe only.
"""
from __future__ import annotations

import os
import time
from datetime import datetime

import pyarrow as pa
import pytest

import fabric
from fabric.client.leader_transactions import end_transaction
from fabric.common.config import TopicConfig
from fabric.common.errors import (
    AuthorizationError,
    InvalidRequestError,
    InvalidTxnStateError,
    UnknownProducerIdError,
)
from fabric.common.records import storage_schema, to_storage
from fabric.common.types import ProducerBatch
from fabric.common.waiting import wait_for
from fabric.server import wire
from fabric.server.connection import put_call
from fabric.storage.log import Log

TOKENS = {"admin-secret": "admin", "node-secret": "node", "app-secret": "app", "mallory-secret": "mallory"}
ACLS = """admin admin topic:*
admin admin group:*
admin admin transactional-id:*
admin admin cluster:fabric
node cluster_action cluster:fabric
app write topic:shared
app read topic:shared
app describe topic:shared
app write transactional-id:app-sink
app describe transactional-id:app-sink
mallory write topic:shared
mallory read topic:shared
mallory describe topic:shared
"""
APP, MALLORY, ADMIN = "app-secret", "mallory-secret", "admin-secret"


@pytest.fixture(scope="module")
def secured(secured_cluster):
    """The module's secured cluster (TOKENS, ACLS; one node) with topic `shared` (2 partitions) made by admin."""
    with connect(secured_cluster, ADMIN) as admin:
        admin.create_topic("shared", partitions=2, replication_factor=1)
    return secured_cluster


def connect(cluster, token: str) -> fabric.Fabric:
    return fabric.connect(cluster.coordinator.url(f"token={token}"))


def rows(values: list[bytes], timestamp_us: int = 1_000_000) -> pa.RecordBatch:
    return to_storage(pa.table({"value": pa.array(values, pa.binary())}), None, timestamp_us).to_batches()[0]


def append(raw, cluster, token: str, values: list[bytes], partition: int = 0, **producer) -> int:
    """A raw DoPut to the leader (the only node) of shared-`partition`, with `producer` fields (producer_id,
    producer_epoch, base_sequence, transactional, transactional_id); the offset answered."""
    batch = rows(values)
    descriptor = wire.put_descriptor("append", topic="shared", partition=partition, codec="none", acks="all",
                                     timeout_ms=8000, **producer)
    return raw.call(cluster.nodes[1].address, put_call(descriptor, batch.schema, lambda: [batch]), token)


def read_committed(fab: fabric.Fabric, partition: int = 0, topic: str = "shared") -> list[bytes]:
    """Every value a read_committed consumer reads from `topic`-`partition`, up to its last stable offset."""
    end = fab.describe_topic(topic).partitions[partition].end_offset
    with fab.consumer(auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, partition)])
        out: list[bytes] = []
        while consumer.position(topic, partition) < end:
            out += [r.value for r in consumer.poll(timeout=2)]
        return out


def test_a_principal_cannot_write_under_another_principals_producer_ids(secured, raw) -> None:
    coordinator = secured.coordinator.address
    mine = [raw.action(coordinator, "init_producer_id", token=MALLORY).producer_id for _ in range(3)]
    # the finding's attack: 2-record batches under the ids after one's own (epoch 0, sequence 0), before another
    # principal takes its id; ids are handed out per principal, so those are at most mallory's own
    forged = set()
    for guess in sorted({i + step for i in mine for step in (1, 2, 3)} - set(mine)):
        try:
            append(raw, secured, MALLORY, [b"forged-1", b"forged-2"], producer_id=guess, producer_epoch=0,
                   base_sequence=0)
            forged.add(guess)
        except (AuthorizationError, UnknownProducerIdError):
            pass
    victim = raw.action(coordinator, "init_producer_id", token=APP).producer_id
    assert victim not in forged | set(mine)
    with pytest.raises(AuthorizationError, match=f"may not write as producer id {victim}.*init_producer_id"):
        append(raw, secured, MALLORY, [b"forged-1", b"forged-2"], producer_id=victim, producer_epoch=0,
               base_sequence=0)
    with pytest.raises(UnknownProducerIdError, match="not handed out"):  # an id outside every block handed out
        append(raw, secured, MALLORY, [b"forged"], producer_id=victim ^ (1 << 40), producer_epoch=0,
               base_sequence=0)
    with pytest.raises(AuthorizationError, match="offsets producer"):  # nor as the coordinator's offsets producer
        append(raw, secured, MALLORY, [b"forged"], producer_id=2**63 - 1, producer_epoch=32767, base_sequence=0)
    # the victim's records under its id, and an idempotent acks=all producer's, land where acknowledged
    first = append(raw, secured, APP, [b"app-0", b"app-1"], producer_id=victim, producer_epoch=0, base_sequence=0)
    with connect(secured, APP) as app:
        with app.producer(enable_idempotence=True, acks="all", linger_ms=0) as producer:
            acked = [producer.send("shared", b"app-%d" % i, partition=0).result(60) for i in range(2, 6)]
        values = read_committed(app)
    assert values[first:first + 2] == [b"app-0", b"app-1"]
    assert [values[m.offset] for m in acked] == [b"app-%d" % i for i in range(2, 6)]


def test_a_transactional_append_needs_the_transactional_id_and_a_registered_writer(secured, raw) -> None:
    with connect(secured, APP) as app:
        writer = app.cluster.init_producer_id()
        stable = app.describe_topic("shared").partitions[1].end_offset
        transactional = dict(producer_id=writer.producer_id, producer_epoch=0, base_sequence=0, transactional=True)
        # only topic write: refused (and mallory's own producer id changes nothing)
        thief = raw.action(secured.coordinator.address, "init_producer_id", token=MALLORY)
        with pytest.raises(InvalidRequestError, match="names its transactional_id"):  # as a client did before
            append(raw, secured, MALLORY, [b"pinned"], 1, **{**transactional, "producer_id": thief.producer_id})
        with pytest.raises(AuthorizationError, match="not allowed to write transactional-id:app-sink"):
            append(raw, secured, MALLORY, [b"pinned"], 1, **{**transactional, "producer_id": thief.producer_id},
                   transactional_id="app-sink")
        # write on the id, but the coordinator never registered the writer: refused
        with pytest.raises(InvalidTxnStateError, match="has no open transaction"):
            append(raw, secured, APP, [b"pinned"], 1, **transactional, transactional_id="app-sink")
        app.cluster.coordinator.add_transaction_writer("app-sink:0", writer.producer_id, 0, [("shared", 1)])
        with pytest.raises(InvalidTxnStateError, match="epoch 1"):  # not the epoch that joined
            append(raw, secured, APP, [b"pinned"], 1, **{**transactional, "producer_epoch": 1},
                   transactional_id="app-sink")
        with pytest.raises(InvalidTxnStateError):  # not a partition it joined with
            append(raw, secured, APP, [b"pinned"], 0, **transactional, transactional_id="app-sink")
        with app.producer(linger_ms=0) as producer:
            producer.send("shared", b"plain", partition=1).result(60)
        # nothing unverified opened: the last stable offset moved past the plain record
        assert app.describe_topic("shared").partitions[1].end_offset == stable + 1
        assert read_committed(app, 1)[-1] == b"plain"
        # the registered writer's append is taken, held back until the commit's markers
        at = append(raw, secured, APP, [b"txn"], 1, **transactional, transactional_id="app-sink")
        assert app.describe_topic("shared").partitions[1].end_offset == at
        with connect(secured, ADMIN) as admin:  # it is not hanging: the coordinator runs it
            assert admin.find_hanging_transactions(topic="shared", max_timeout_ms=0) == []
            with pytest.raises(InvalidTxnStateError, match="not hanging: transactional id app-sink runs it"):
                admin.abort_hanging_transaction("shared", 1, at)
        app.cluster.coordinator.commit_transaction("app-sink:0", [writer.producer_id])
        end_transaction(app.cluster, "app-sink:0")
        assert read_committed(app, 1)[-2:] == [b"plain", b"txn"]


def test_a_hanging_transaction_from_before_verification_is_found_and_aborted(secured, fabric_cli) -> None:
    """A transactional frame of a producer id the coordinator never saw, in the replica's log (as a leader that
    did not verify transactional appends took it), pins the last stable offset; find-hanging lists it and abort
    by its start offset clears it."""
    with connect(secured, ADMIN) as admin:
        admin.create_topic("hanging", replication_factor=1)
        with admin.producer(linger_ms=0) as producer:
            producer.send("hanging", b"before", partition=0).result(60)
        leader_epoch = admin.cluster.describe_cluster(refresh=True).partitions[("hanging", 0)].state.leader_epoch
    node = secured.nodes[1]
    node.stop()
    plog = Log(os.path.join(node.data_dir, "hanging", "0"), storage_schema(), TopicConfig({}), replica=True)
    start = plog.append(rows([b"forged"], time.time_ns() // 1000), leader_epoch=leader_epoch,
                        producer=ProducerBatch(12345, 0, 0), transactional=True)
    secured.restart(1)

    def cli(*args: str, ok: bool = True) -> str:
        proc = fabric_cli("--url", secured.url, "transactions", *args, env={**os.environ, "FABRIC_TOKEN": ADMIN})
        assert (proc.returncode == 0) == ok and "Traceback" not in proc.stderr, proc.stderr
        return proc.stdout + proc.stderr

    with connect(secured, ADMIN) as admin:
        with admin.producer(linger_ms=0) as producer:  # retried until the restarted node leads again
            producer.send("hanging", b"after", partition=0).result(120)
        assert admin.describe_topic("hanging").partitions[0].end_offset == start  # pinned by the forged frame
        # kafka-transactions describe-producers: the forged producer with its open transaction, then the admin's
        # two idempotent producers, each at its sequence 0, the later one first
        listed = [line.split() for line in cli("describe-producers", "--topic", "hanging", "--partition",
                                                "0").splitlines()[1:]]
        assert [(row[0], row[1], row[2], row[4]) for row in listed[:1]] == [("12345", "0", "0", str(start))], listed
        assert [(row[2], row[4]) for row in listed[1:]] == [("0", "-1"), ("0", "-1")], listed
        assert all(datetime.fromisoformat(row[3]).year >= 2026 for row in listed), listed  # a time, not "-"
        assert "--partition" in cli("describe-producers", "--topic", "hanging", ok=False)
        for listing in (cli("find-hanging", "--topic", "hanging"), cli("find-hanging", "--node-id", "1")):
            found = [line.split() for line in listing.splitlines()[1:] if line.startswith("hanging ")]
            assert [row[:5] + row[6:] for row in found] == [["hanging", "0", "12345", "0", str(start), "unknown"]], \
                listing
        assert "no transaction open on hanging-0 starts at offset 0" in cli(
            "abort", "--topic", "hanging", "--partition", "0", "--start-offset", "0", ok=False)
        assert "Aborted the transaction of producer 12345" in cli(
            "abort", "--topic", "hanging", "--partition", "0", "--start-offset", str(start))
        assert read_committed(admin, topic="hanging") == [b"before", b"after"]
        assert admin.find_hanging_transactions(topic="hanging") == []
        forged = next(p for p in admin.describe_producers("hanging", 0) if p.producer_id == 12345)
        assert (forged.producer_epoch, forged.transaction_start_offset) == (1, -1)  # fenced by the abort marker


def test_a_nodes_status_shows_a_principal_the_configs_of_the_topics_it_may_describe(secured) -> None:
    with connect(secured, ADMIN) as admin:
        admin.create_topic("private", partitions=1, replication_factor=1, config={"retention.ms": 60_000})
        node = secured.nodes[1]
        wait_for(lambda: "private" in node.status(token=ADMIN)["topics"], what="the node to host topic private")
        assert node.status(token=ADMIN)["topics"]["private"] == {"retention.ms": "60000"}
        assert set(node.status(token=MALLORY)["topics"]) == {"shared"}  # describe on topic:shared only
        admin.delete_topic("private")
