"""A real coordinator service process against hostile and careless callers: another principal's transactional
id, writes that do not match their topic, raw admin calls with configs, schemas and counts no client would send,
offsets outside the logs, oversized and deeply nested requests, bad --listen addresses, secrets in URLs and
misplaced token files, and a data directory whose metadata was lost. Each is refused with an error naming the
problem, changes nothing, and the service keeps serving."""
from __future__ import annotations

import json
import os
import re
import socket
import time
from typing import Any, Callable

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import fabric
from fabric.common.errors import (
    AuthorizationError,
    CorruptRecordError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    SchemaMismatchError,
)
from fabric.common.records import to_storage
from fabric.common.types import TransactionalOffsets
from fabric.server import wire
from fabric.storage import frame

ADMIN, APP, VICTIM = "admin-secret", "app-secret", "victim-secret"
TYPED = pa.schema([("user", pa.string()), ("amount", pa.int64())])
GRANTS = """app describe topic:orders
app read topic:orders
app write topic:orders
app group group:billing
app describe group:billing
app write transactional-id:app-sink
app describe transactional-id:app-sink
victim describe topic:orders
victim read topic:orders
victim write topic:orders
victim write transactional-id:victim
victim describe transactional-id:victim
"""


def rows(values: list, schema: pa.Schema | None = None) -> pa.RecordBatch:
    table = pa.table({"value": values}) if schema is None else pa.Table.from_pylist(values, schema=schema)
    return to_storage(table, schema, time.time_ns() // 1000).to_batches()[0]


@pytest.fixture
def secured(secured_service, tmp_path):
    """A service with tokens (admin, app, victim) and ACLs (GRANTS), topics orders (2 partitions, 3 records in 0),
    typed (TYPED) and small (max.message.bytes=100), and a raw Flight client sending the admin token.
    Yields (instance, raw, call) where call(name, **args) is a raw admin DoAction."""
    (tmp_path / "service.properties").write_text("topic.max.partitions=5\n")
    instance = secured_service({ADMIN: "admin", APP: "app", VICTIM: "victim"}, GRANTS,
                               "--config", str(tmp_path / "service.properties"))
    with fabric.connect(instance.url(f"token={ADMIN}")) as admin:
        admin.create_topic("orders", partitions=2)
        admin.create_topic("typed", schema=TYPED)
        admin.create_topic("small", config={"max.message.bytes": "100"})
        admin.cluster.append("orders", 0, rows([b"a", b"b", b"c"]))
    options = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {ADMIN}".encode())])
    with flight.connect(f"grpc://{instance.address}") as raw:
        def call(action_name: str, body: bytes | None = None, /, **args: Any) -> Any:
            action = flight.Action(action_name, body if body is not None else wire.dumps(args))
            return wire.loads(next(iter(raw.do_action(action, options))).body)
        yield instance, raw, call


def snapshot(url: str) -> dict[str, Any]:
    """Everything a refused call could have changed, read as the admin."""
    with fabric.connect(url) as fab:
        topics = {}
        for name in fab.list_topics():
            info = fab.cluster.coordinator.topic(name)
            topics[name] = (info.partitions, info.config, str(info.value_schema),
                            [[f.batch.column("value").to_pylist() for f in fab.cluster.fetch(name, p, 0, 1 << 20)]
                             for p in range(info.partitions)])
        groups = {g: fab.cluster.coordinator.committed(g) for g in fab.list_groups()}
        txns = {t: fab.cluster.coordinator.transaction_committed(t) for t in ("victim:1", "app-sink:1")}
    return {"topics": topics, "groups": groups, "transactions": txns}


def refused(instance, call: Callable[[], Any], error: type[Exception], match: str) -> str:
    """`call` raises `error` matching `match` and changes nothing; returns the message."""
    before = snapshot(instance.url(f"token={ADMIN}"))
    with pytest.raises(error, match=match) as raised:
        call()
    assert snapshot(instance.url(f"token={ADMIN}")) == before
    return str(raised.value)


def raw_error(call: Callable[[], Any]) -> dict[str, Any]:
    with pytest.raises(flight.FlightError) as raised:
        call()
    return wire.error_details(raised.value)


def test_a_writer_cannot_publish_or_commit_under_another_sinks_transactional_id(secured) -> None:
    instance, _, _ = secured
    with fabric.connect(instance.url(f"token={APP}")) as app, \
            fabric.connect(instance.url(f"token={VICTIM}")) as victim:
        header, payload = app.cluster.frame_encoder("orders").encode(rows([b"x"]))
        for hijack in (lambda: app.cluster.publish("victim:999999", {("orders", 1): [rows([b"x"])]}),
                       lambda: app.cluster.publish_frames("victim:999999", {("orders", 1): [
                           pa.py_buffer(header + payload.to_pybytes())]}),
                       lambda: app.cluster.coordinator.commit_transaction("victim:999999"),
                       lambda: app.cluster.coordinator.transaction_committed("victim:1")):
            refused(instance, hijack, AuthorizationError, "principal 'app' is not allowed to (write|describe) "
                                                          "transactional-id:victim")
        # a transaction's group offsets need the rights of committing them, besides its transactional id's
        refused(instance, lambda: victim.cluster.coordinator.commit_transaction(
            "victim:999999", [], TransactionalOffsets("billing", {("orders", 0): 1})), AuthorizationError,
            "principal 'victim' is not allowed to group group:billing")
        assert victim.cluster.publish("victim:1", {("orders", 1): [rows([b"mine"])]}) is True
        assert victim.cluster.coordinator.transaction_committed("victim:1")
        assert app.cluster.publish("app-sink:1", {("orders", 1): [rows([b"theirs"])]}) is True
        assert [f.batch.column("value").to_pylist() for f in victim.cluster.fetch("orders", 1, 0, 1 << 20)] == [
            [b"mine"], [b"theirs"]]


def test_the_service_checks_what_it_writes(secured) -> None:
    instance, _, _ = secured
    with fabric.connect(instance.url(f"token={ADMIN}")) as admin:
        cluster = admin.cluster
        refused(instance, lambda: cluster.append("small", 0, rows([b"x" * 2_000_000])), RecordTooLargeError,
                "record of 2000000 bytes .* exceeds max.message.bytes=100")
        wrong = rows([{"user": "u", "amount": 1.5}], pa.schema([("user", pa.string()), ("amount", pa.float64())]))
        refused(instance, lambda: cluster.publish("admin-sink:1", {("typed", 0): [wrong]}), SchemaMismatchError,
                "storage schema")
        header, payload = cluster.frame_encoder("orders").encode(rows([b"one"]))
        parsed = frame.unpack_header(header)
        forged = frame.seal(frame.FrameHeader(0, 0, 100, parsed.first_timestamp, parsed.max_timestamp,
                                              parsed.attributes), payload)
        refused(instance, lambda: cluster.publish_frames("admin-sink:1", {("orders", 1): [
            pa.py_buffer(forged.pack() + payload.to_pybytes())]}), CorruptRecordError, "claims 100 records")
        stamped = rows([b"no time"])
        unstamped = stamped.set_column(0, "timestamp", pa.nulls(1, stamped.schema.field("timestamp").type))
        refused(instance, lambda: cluster.append("orders", 1, unstamped), InvalidRecordError, "have no timestamp")
        assert cluster.publish("admin-sink:1", {("typed", 0): [rows([{"user": "u", "amount": 1}], TYPED)]})
        assert [f.batch.num_rows for f in cluster.fetch("typed", 0, 0, 1 << 20)] == [1]


def test_raw_admin_calls_are_validated_by_the_service(secured) -> None:
    instance, _, call = secured
    cases = [
        (dict(name="alter_topic_config", args={"name": "orders", "config": {"no.such.key": "1"}}),
         InvalidConfigError, "unknown topic config 'no.such.key'"),
        (dict(name="alter_topic_config", args={"name": "orders", "config": {"segment.bytes": "1"}}),
         InvalidConfigError, "segment.bytes"),
        (dict(name="create_topic", args={"name": "keyed", "partitions": 1, "config": {},
                                         "value_schema": pa.schema([("key", pa.string())])}),
         SchemaMismatchError, "'key' clashes"),
        (dict(name="create_topic", args={"name": "tiny", "partitions": 1, "config": {"segment.bytes": "1"},
                                         "value_schema": None}), InvalidConfigError, "segment.bytes"),
        (dict(name="create_topic", args={"name": "many", "partitions": 6, "config": {}, "value_schema": None}),
         InvalidPartitionsError, "limit is 5 per topic"),
        (dict(name="create_topic", args={"name": "huge", "partitions": 2**70, "config": {}, "value_schema": None}),
         InvalidRequestError, "'partitions' must be int \\(64-bit\\)"),
        (dict(name="create_partitions", args={"name": "orders", "total": 6}), InvalidPartitionsError, "limit is 5"),
        (dict(name="set_partitions", args={"name": "orders", "total": 10**12}), InvalidPartitionsError, "limit"),
        (dict(name="commit_offsets", args={"group": "billing", "offsets": {("orders", 0): 4}}),
         OffsetOutOfRangeError, r"holds offsets \[0, 3\]"),
        (dict(name="commit_offsets", args={"group": "billing", "offsets": {("orders", 9): 0}}), Exception,
         "no partition 9"),
        (dict(name="commit_transaction", args={"txn": "q:" + "9" * 30}), InvalidRequestError, "sequence"),
        (dict(name="delete_offsets", args={"group": "billing", "partitions": "orders"}), InvalidRequestError,
         "partitions"),
        (dict(name="delete_offsets", args={"group": "billing", "partitions": [("orders", -1)]}),
         InvalidRequestError, r"a partition must be a \(topic, partition\) pair"),
        (dict(name="delete_offsets", args={"group": "billing", "partitions": [("no/such", 0)]}), Exception,
         "no/such"),
    ]
    for case, error, match in cases:
        before = snapshot(instance.url(f"token={ADMIN}"))
        with pytest.raises(flight.FlightError) as raised:
            call(case["name"], **case["args"])
        got = wire.error_details(raised.value)
        assert error is Exception or got["type"] == error.__name__, (case, got)
        assert re.search(match, got["message"]), (case, got)
        assert snapshot(instance.url(f"token={ADMIN}")) == before
    with fabric.connect(instance.url(f"token={APP}")) as app:  # still usable by everyone
        with app.producer() as producer:
            producer.send("orders", b"d", partition=0)
        consumer = app.consumer("orders", group_id="billing", auto_offset_reset="earliest", enable_auto_commit=False)
        got: list = []
        while len(got) < 4:
            got += consumer.poll(1.0)
        consumer.commit()
        consumer.close()


def test_only_a_groups_admin_deletes_its_offsets(secured) -> None:
    """Deleting a group's offsets needs admin on the group, as Kafka's OffsetDelete needs DELETE: the app, which
    commits for billing, is refused and nothing changes; the admin deletes them."""
    instance, _, _ = secured
    with fabric.connect(instance.url(f"token={ADMIN}")) as admin:
        admin.cluster.commit_offsets("billing", {("orders", 0): 2})
    with fabric.connect(instance.url(f"token={APP}")) as app:
        refused(instance, lambda: app.delete_offsets("billing", "orders"), AuthorizationError,
                "principal 'app' is not allowed to admin group:billing")
    with fabric.connect(instance.url(f"token={ADMIN}")) as admin:
        assert admin.delete_offsets("billing", "orders") == [("orders", 0)]
        assert admin.cluster.coordinator.committed("billing") == {}


def test_oversized_and_deeply_nested_requests_are_refused_up_front(secured) -> None:
    instance, raw, call = secured
    options = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {ADMIN}".encode())])
    big = b'{"$": "dict", "v": [["group", "' + b"g" * (5 << 20) + b'"]]}'
    deep = b"[" * 100_000 + b"]" * 100_000
    nested = json.dumps({"$": "dict", "v": [["group", json.loads("[" * 60 + "1" + "]" * 60)]]}).encode()
    probes = [
        (lambda: call("commit_offsets", big), r"action body is \d+ bytes, over the limit of 2097152"),
        (lambda: call("commit_offsets", deep), "nests deeper than"),
        (lambda: call("heartbeat", nested), "nests deeper than 32 levels"),
        (lambda: call("x" * (1 << 20)), "unknown coordinator action"),
        (lambda: raw.do_get(flight.Ticket(big), options).read_all(), r"DoGet ticket is \d+ bytes, over the limit"),
        (lambda: raw.do_get(flight.Ticket(deep), options).read_all(), "DoGet ticket nests deeper"),
        (lambda: raw.do_put(flight.FlightDescriptor.for_command(deep), wire.ENVELOPE, options)[1].read(),
         "DoPut descriptor nests deeper"),
    ]
    for probe, match in probes:
        before = snapshot(instance.url(f"token={ADMIN}"))
        details = raw_error(probe)
        assert details["type"] == "InvalidRequestError" and re.search(match, details["message"]), details
        assert len(details["message"]) < 1000  # never the input
        assert snapshot(instance.url(f"token={ADMIN}")) == before
    assert call("status").instance == instance.address  # still answering


def test_bad_listen_addresses_are_clear_errors(fabric_cli, tmp_path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for listen, message in ((f"127.0.0.1:{port}", f"cannot listen on 127.0.0.1:{port}: Address already in use"),
                                ("abc", "must be HOST:PORT"), ("127.0.0.1:99999", "port from 0 to 65535")):
            started = fabric_cli("coordinator", "start", "--listen", listen, "--data", str(tmp_path / "d"))
            assert started.returncode == 1 and "Traceback" not in started.stderr, started.stderr
            assert "error: " in started.stderr and message in started.stderr, started.stderr


def test_secrets_never_reach_errors_or_logs(fabric_cli, tmp_path) -> None:
    secret = "TOKEN-s3cr3t-" + os.urandom(4).hex()
    listed = fabric_cli("--url", f"fabric://127.0.0.1:1?token={secret}&timeout_ms=abc", "topics", "list")
    assert listed.returncode == 1 and secret not in listed.stderr + listed.stdout, listed.stderr
    assert "token=***" in listed.stderr
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{secret} admin extra-field\n")
    bad_tokens = fabric_cli("coordinator", "start", "--listen", "127.0.0.1:0", "--data", str(tmp_path / "d"),
                            "--tokens-file", str(tokens))
    tokens.write_text(f"{secret} admin\n")
    tokens_as_acls = fabric_cli("coordinator", "start", "--listen", "127.0.0.1:0", "--data", str(tmp_path / "d"),
                                "--acl-file", str(tokens))
    for started in (bad_tokens, tokens_as_acls):
        assert started.returncode == 1 and "Traceback" not in started.stderr, started.stderr
        assert secret not in started.stderr + started.stdout and "the line is not shown" in started.stderr


def test_topics_lost_with_the_metadata_are_recovered_through_the_service(secured_service, fabric_cli,
                                                                       tmp_path) -> None:
    tokens = {ADMIN: "admin", APP: "app"}
    instance = secured_service(tokens, GRANTS)
    with fabric.connect(instance.url(f"token={ADMIN}")) as admin:
        admin.create_topic("orders", partitions=2, schema=TYPED)
        admin.cluster.append("orders", 1, rows([{"user": "u", "amount": 5}], TYPED))
    instance.stop()
    for name in os.listdir(os.path.join(instance.data_dir, "__fabric")):
        if name.startswith("metadata.db"):
            os.unlink(os.path.join(instance.data_dir, "__fabric", name))
    again = secured_service(tokens, GRANTS, data_dir=instance.data_dir)
    with fabric.connect(again.url(f"token={ADMIN}")) as admin, fabric.connect(again.url(f"token={APP}")) as app:
        with pytest.raises(Exception, match="fabric topics recover orders"):
            admin.create_topic("orders", partitions=1)
        with pytest.raises(AuthorizationError, match="not allowed to create topic:orders"):
            app.recover_topics("orders")
        (tmp_path / "admin.properties").write_text(f"token={ADMIN}\n")  # Kafka's --command-config: no token in argv
        recovered = fabric_cli("--url", again.url(), "topics", "recover", "orders", "--command-config",
                               str(tmp_path / "admin.properties"))
        assert recovered.returncode == 0 and "recovered" in recovered.stdout, recovered.stderr
        assert admin.describe_topic("orders").value_schema.equals(TYPED)
        [fetched] = admin.cluster.fetch("orders", 1, 0, 1 << 20)
        assert fetched.batch.column("value").to_pylist() == [{"user": "u", "amount": 5}]
