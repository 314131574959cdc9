"""Fuzzing a real coordinator service process with raw Flight calls from an unprivileged token: randomised
well-formed and malformed actions (every route, arguments drawn by name from its signature), DoGet tickets and
DoPut descriptors and bodies (stored rows, publish envelopes of rows, frames, forged frames and junk; idempotent
and transactional appends under another principal's producer ids).

After every call: nothing changed that the principal's ACLs do not allow (topics, configs, partition counts,
schemas, other topics' data, other groups' offsets, other transactional ids), every partition of every topic
is still readable from its start, and the service still answers. At the end a well-formed client produces and
consumes as usual, and the other principal's producers append under their ids as if nobody had tried. Bounded:
EXAMPLES calls (about ten seconds), not shrunk (a failure is reported as found, with the call that caused it).

The same over the fabric protocol (docs/protocol.md): requests of every type (and unknown ones) with arguments
drawn as above, rows, junk or nothing as payloads, after a hello with the fuzz token, an unknown one or another
protocol version; and streams that break the framing (an oversized frame, a frame cut short, a gRPC client's
preface, junk). Every refusal names a fabric error, and nothing the principal may not change changes.
"""
from __future__ import annotations

import inspect
import json
import socket
import time
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import fabric
import fabric.common.errors as errors
from fabric.common.config import TOPIC_SETTINGS, TopicConfig
from fabric.common.protocol import frames as protocol_frames
from fabric.common.records import storage_schema, to_storage
from fabric.common.types import JoinRequest
from fabric.server import wire
from fabric.server.broker import Broker
from fabric.server.service import INTERFACES, ROUTES
from fabric.storage import frame
from fabric.storage.encoder import FrameEncoder

ADMIN, FUZZ = "admin-token", "fuzz-token"
TYPED = pa.schema([("user", pa.string()), ("amount", pa.int64())])
GRANTS = """fuzz describe topic:mine
fuzz read topic:mine
fuzz write topic:mine
fuzz group group:fz
fuzz describe group:fz
fuzz write transactional-id:fz
fuzz describe transactional-id:fz
"""
TOPICS = ["mine", "theirs", "typed"]
EXAMPLES = 600
VICTIMS: list[int] = []  # producer ids the admin took (the fuzzed fixture fills it): the fuzzer may not use them


def stored(values: list, schema: pa.Schema | None = None) -> pa.RecordBatch:
    table = pa.table({"value": values}) if schema is None else pa.Table.from_pylist(values, schema=schema)
    return to_storage(table, schema, time.time_ns() // 1000).to_batches()[0]


# -- what the fuzzer sends ------------------------------------------------------------------------------------
# biased towards what the fuzz principal may touch, so well-formed calls also get past the ACLs
def mostly(likely: st.SearchStrategy, other: st.SearchStrategy) -> st.SearchStrategy:
    """`likely` three times in four."""
    return st.one_of(likely, likely, likely, other)


names = mostly(st.sampled_from(["mine"] * 6 + TOPICS + ["new-topic", "__fabric", "../etc", "", "x" * 300]),
               st.text(max_size=12))
ints = mostly(st.integers(-1, 3), st.integers(-3, 12) | st.integers()
              | st.sampled_from([2**31, 2**63 - 1, 2**63, -(2**63) - 1, 10**30]))
texts = mostly(st.sampled_from(["fz"] * 4 + ["theirs-g", "", "x" * 2000]), st.text(max_size=16))
txns = mostly(st.builds(lambda n: f"fz:{n}", st.integers(0, 10**6)), st.sampled_from(
    ["fz", "their-sink:6", "their-sink:99", "fz:" + "9" * 25, ""]) | st.text(max_size=12))
schemas = st.sampled_from([None, TYPED, pa.schema([("key", pa.string())]), pa.schema([]),
                           pa.schema([("v", pa.dictionary(pa.int8(), pa.string()))])])
configs = st.dictionaries(st.sampled_from(sorted(TOPIC_SETTINGS)) | st.text(max_size=8),
                          st.sampled_from(["1", "0", "-1", "1024", "delete", "compact", "lz4", "abc", "9" * 30])
                          | st.none(), max_size=3)
partitions = st.tuples(names, ints)
join_requests = st.builds(JoinRequest, texts, texts, st.lists(names, max_size=3).map(tuple),
                          st.lists(st.sampled_from(["range", "roundrobin", "cooperative-sticky", "x"]),
                                   max_size=2).map(tuple),
                          texts, texts, ints, ints, st.lists(partitions, max_size=2).map(tuple))
BY_NAME: dict[str, st.SearchStrategy] = {
    "name": names, "topic": names, "partition": ints, "partitions": ints, "total": ints, "offset": ints,
    "max_bytes": ints, "end_offset": st.none() | ints, "timestamp_us": ints, "config": configs,
    "value_schema": schemas, "group": texts, "member_id": texts, "generation": ints, "metadata": texts,
    "txn": txns, "offsets": st.dictionaries(partitions, ints, max_size=3), "request": join_requests,
    "names": st.none() | st.lists(names, max_size=3), "topics": st.none() | st.lists(names, max_size=3),
    "codec": st.sampled_from(["none", "lz4", "zstd", "gzip", ""]),
    "producer_id": mostly(st.deferred(lambda: st.sampled_from(VICTIMS)), ints),
    "producer_epoch": ints, "base_sequence": ints,
}
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                         max_size=3), max_leaves=12)


@st.composite
def arguments(draw: Any, method: Any) -> dict[str, Any]:
    """Arguments for `method`, drawn by parameter name; sometimes one missing, one extra or one mistyped."""
    params = [p for p in inspect.signature(method).parameters if p != "self"]
    args = {p: draw(BY_NAME.get(p, texts)) for p in params if draw(st.integers(0, 9)) or p not in ("metadata",)}
    twist = draw(st.integers(0, 14))
    if twist == 0 and args:
        args.pop(draw(st.sampled_from(sorted(args))))
    elif twist == 1:
        args[draw(st.text(min_size=1, max_size=6))] = draw(texts)
    elif twist == 2 and args:
        args[draw(st.sampled_from(sorted(args)))] = draw(json_values)
    return args


def body_bytes(draw: Any, well_formed: dict[str, Any]) -> bytes:
    """The request bytes: the wire encoding of `well_formed` (four times in five), or junk, random JSON, deep
    nesting, a mutation."""
    encoded = wire.dumps(well_formed)
    if draw(st.integers(0, 4)):
        return encoded
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.binary(max_size=64))
    if kind == 1:
        return json.dumps(draw(json_values)).encode()
    if kind == 2:
        depth = draw(st.sampled_from([40, 2000, 200_000]))
        return b"[" * depth + b"]" * depth
    if kind == 3 and encoded:
        position = draw(st.integers(0, len(encoded) - 1))
        return encoded[:position] + bytes([draw(st.integers(0, 255))]) + encoded[position + 1:]
    return encoded


@st.composite
def actions(draw: Any) -> tuple[str, str, bytes]:
    name = draw(mostly(st.sampled_from(sorted(ROUTES)), st.text(max_size=10)))
    route = ROUTES.get(name)
    args = draw(arguments(getattr(INTERFACES[route.target], name))) if route else {}
    return "action", name, body_bytes(draw, args)


@st.composite
def tickets(draw: Any) -> tuple[str, str, bytes]:
    return "get", "", body_bytes(draw, draw(arguments(Broker.fetch)))


def forged_frames(draw: Any, topic: str) -> bytes:
    """Frames for `topic`: valid, with a lying record count or timestamps (CRC resealed), torn, or junk."""
    schema = TYPED if topic == "typed" else None
    rows = stored([{"user": "u", "amount": 1}] if schema else [b"f" * draw(st.integers(0, 3000))], schema)
    payload = frame.encode_batch(rows)
    stamp = rows.column(0)[0].value
    count, first, last = rows.num_rows, stamp, stamp
    kind = draw(st.integers(0, 4))
    if kind == 1:
        count = draw(st.integers(0, 2**31 - 1))
    elif kind == 2:
        first, last = 0, draw(st.integers(0, 2**62))
    data = frame.seal(frame.FrameHeader(0, 0, count, first, last), payload).pack() + payload.to_pybytes()
    if kind == 3:
        data = data[:-1] + bytes([data[-1] ^ 0xFF])
    return draw(st.binary(max_size=200)) if kind == 4 else data


@st.composite
def puts(draw: Any) -> tuple[str, Any, Any]:
    op = draw(st.sampled_from(["append", "append", "publish", "publish", "publish_frames", "publish_frames",
                               "truncate"]))
    if op == "append":
        args = draw(arguments(Broker.append))
        args.pop("rows", None)
        batch = draw(st.sampled_from([stored([b"a"]), stored([{"user": "u", "amount": 1}], TYPED),
                                      pa.record_batch([["x"]], names=["value"]),
                                      stored([b"x" * 2_000_000])]))
        return "put", body_bytes(draw, {"op": op, **args}), [batch]
    keys = draw(st.lists(st.tuples(st.sampled_from(["mine"] * 4 + TOPICS + ["nope"]), ints), min_size=1,
                         max_size=2))
    descriptor = {"op": op, "txn": draw(txns), "keys": [list(k) for k in keys]}
    if op == "publish":
        descriptor["codec"] = draw(BY_NAME["codec"])
    envelope = []
    for key in keys:
        if op == "publish_frames":
            payload = forged_frames(draw, key[0])
        else:
            payload = draw(st.sampled_from([
                wire.ipc_bytes(stored([b"p"])), wire.ipc_bytes(stored([{"user": "u", "amount": 2}], TYPED)),
                wire.ipc_bytes(pa.record_batch([[1]], names=["value"])), b"junk", b""]))
        partition = key[1] if -(2**31) <= key[1] < 2**31 else 0
        envelope.append(pa.record_batch([[key[0]], [partition], [payload]], schema=wire.ENVELOPE))
    return "put", body_bytes(draw, descriptor), envelope


@st.composite
def well_formed(draw: Any) -> tuple[str, Any, Any]:
    """A call a correct client of the fuzz principal could make, with random contents: appends, publishes and
    frames to `mine`, offset commits and membership calls of group fz, fetches and lookups."""
    partition = draw(st.integers(0, 1))
    values = draw(st.lists(st.binary(max_size=300), min_size=1, max_size=20))
    batch = stored(values)
    txn = f"fz:{draw(st.integers(0, 10**6))}"
    kind = draw(st.integers(0, 8))
    if kind == 0:
        codec = draw(st.sampled_from(["none", "lz4", "zstd"]))
        return "put", wire.dumps({"op": "append", "topic": "mine", "partition": partition, "codec": codec}), [batch]
    if kind == 8:  # as the admin's producers: forged sequences under their ids, idempotent or transactional
        producer = {"producer_id": draw(st.sampled_from(VICTIMS)), "producer_epoch": draw(st.integers(0, 2)),
                    "base_sequence": draw(st.integers(0, 3))}
        if draw(st.booleans()):
            producer.update(transactional=True, transactional_id=draw(st.sampled_from(["fz", "their-sink"])))
        return "put", wire.dumps({"op": "append", "topic": "mine", "partition": 0, "codec": "none", **producer}), [
            batch]
    if kind == 1:
        keys = sorted({("mine", partition), ("mine", draw(st.integers(0, 1)))})
        return "put", wire.dumps({"op": "publish", "txn": txn, "keys": [list(k) for k in keys], "codec": "none"}), [
            pa.record_batch([["mine"], [p], [wire.ipc_bytes(batch)]], schema=wire.ENVELOPE) for _, p in keys]
    if kind == 2:
        payload = forged_frames(draw, "mine") if draw(st.booleans()) else \
            b"".join(bytes(x) for x in FrameEncoder(storage_schema(), 0).encode(batch))
        return "put", wire.dumps({"op": "publish_frames", "txn": txn, "keys": [["mine", partition]]}), [
            pa.record_batch([["mine"], [partition], [payload]], schema=wire.ENVELOPE)]
    if kind == 3:
        return "action", "commit_offsets", wire.dumps({"group": "fz", "offsets": {("mine", partition): draw(
            st.integers(-1, 50))}})
    if kind == 4:
        return "get", "", wire.fetch_ticket("mine", partition, draw(st.integers(0, 50)), draw(st.integers(1, 1 << 20)),
                                            draw(st.none() | st.integers(0, 60))).ticket
    if kind == 5:
        request = JoinRequest("fz", "", ("mine",), session_timeout_ms=draw(st.integers(1, 60000)))
        return "action", "join_group", wire.dumps({"request": request})
    if kind == 6:
        return "action", "transaction_committed", wire.dumps({"txn": txn})
    name = draw(st.sampled_from(["partition_state", "offset_for_time", "topic", "list_topics", "describe_group"]))
    args = {"partition_state": {"topic": "mine", "partition": partition}, "topic": {"name": "mine"},
            "offset_for_time": {"topic": "mine", "partition": partition, "timestamp_us": draw(ints)},
            "list_topics": {}, "describe_group": {"group": "fz"}}[name]
    return "action", name, wire.dumps(args)


# -- the service and what must hold -----------------------------------------------------------------------------
@pytest.fixture
def fuzzed(secured_service):
    """A service with tokens and GRANTS; admin made topics mine (2 partitions), theirs (2, records, small
    max.message.bytes) and typed, group theirs-g with offsets, and committed transaction their-sink:5, and took
    two producer ids (VICTIMS), the first of which wrote two records to mine-0."""
    instance = secured_service({ADMIN: "admin", FUZZ: "fuzz"}, GRANTS, "--max-partitions", "8")
    admin = fabric.connect(instance.url(f"token={ADMIN}"))
    admin.create_topic("mine", partitions=2)
    admin.create_topic("theirs", partitions=2, config={"max.message.bytes": "1000"})
    admin.create_topic("typed", schema=TYPED)
    VICTIMS[:] = [admin.cluster.init_producer_id().producer_id for _ in range(2)]
    admin.cluster.append("mine", 0, stored([b"v0", b"v1"]), producer_id=VICTIMS[0], producer_epoch=0,
                         base_sequence=0)
    admin.cluster.append("theirs", 0, stored([b"t0", b"t1"]))
    admin.cluster.append("typed", 0, stored([{"user": "a", "amount": 1}], TYPED))
    admin.cluster.commit_offsets("theirs-g", {("theirs", 0): 1})
    assert admin.cluster.publish("their-sink:5", {("theirs", 1): [stored([b"s"])]})
    yield instance, admin
    admin.close()


def protected(admin) -> dict[str, Any]:
    """What the fuzz principal may not change: every topic's metadata, other topics' ends, other groups'
    offsets, other transactional ids."""
    coordinator = admin.cluster.coordinator
    topics = {t: coordinator.topic(t) for t in coordinator.list_topics()}
    ends = {(t, p): admin.cluster.partition_state(t, p).end_offset for t in topics if t != "mine"
            for p in range(topics[t].partitions)}
    return {"topics": topics, "ends": ends,
            "groups": {g: coordinator.committed(g) for g in coordinator.list_groups() if g != "fz"},
            "txns": [coordinator.transaction_committed(t) for t in ("their-sink:5", "their-sink:6")]}


def assert_usable(admin) -> None:
    """Every partition of every topic reads from its start to its end and decodes; configs parse."""
    for name in admin.list_topics():
        info = admin.cluster.coordinator.topic(name)
        TopicConfig(info.config)
        for p in range(info.partitions):
            state = admin.cluster.partition_state(name, p)
            offset = state.start_offset
            while offset < state.end_offset:
                fetched = admin.cluster.fetch(name, p, offset, 1 << 20)
                assert fetched, (name, p, offset)
                for f in fetched:
                    f.batch.validate(full=True)
                    offset = f.offset + f.batch.num_rows


def test_fuzzed_flight_calls_never_break_the_service(fuzzed) -> None:
    instance, admin = fuzzed
    options = flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {FUZZ}".encode())], timeout=30)
    raw = flight.connect(f"grpc://{instance.address}")
    before = protected(admin)
    started = time.monotonic()

    @settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.sampled_from([well_formed, actions, tickets, puts]).flatmap(lambda make: make()))
    def call(request: tuple) -> None:
        kind = request[0]
        try:
            if kind == "action":
                list(raw.do_action(flight.Action(request[1], request[2]), options))
            elif kind == "get":
                raw.do_get(flight.Ticket(request[2]), options).read_all()
            else:
                _, command, batches = request
                writer, answers = raw.do_put(flight.FlightDescriptor.for_command(command), batches[0].schema, options)
                try:
                    for batch in batches:
                        writer.write_batch(batch)
                    writer.done_writing()
                    answers.read()
                finally:
                    writer.close()
        except flight.FlightError as exc:
            details = wire.error_details(exc)
            assert isinstance(exc, (flight.FlightServerError, flight.FlightUnauthorizedError)) or \
                details.get("type") == "InvalidRequestError", (type(exc), str(exc)[:300])
            assert len(str(exc)) < 4000  # an error never echoes a large input
        assert protected(admin) == before
        assert admin.cluster.connection.status_of(instance.address).active

    call()
    assert_usable(admin)
    assert any(admin.cluster.partition_state("mine", p).end_offset for p in (0, 1)), \
        "no fuzzed write was admitted: the fuzzer did not exercise the write paths"
    with fabric.connect(instance.url(f"token={FUZZ}")) as fuzz:  # a well-formed client still works
        with fuzz.producer() as producer:
            producer.send("mine", b"after", partition=1)
        consumer = fuzz.consumer("mine", auto_offset_reset="earliest")
        consumer.assign([("mine", 1)])
        records = []
        deadline = time.monotonic() + 30
        while not any(r.value == b"after" for r in records) and time.monotonic() < deadline:
            records += consumer.poll(0.5)
        assert any(r.value == b"after" for r in records)
        consumer.close()
    for victim, sequence in ((VICTIMS[0], 2), (VICTIMS[1], 0)):  # nothing was written under the admin's ids
        end = admin.cluster.partition_state("mine", 0).end_offset
        assert admin.cluster.append("mine", 0, stored([b"victim"]), producer_id=victim, producer_epoch=0,
                                    base_sequence=sequence) == end
        assert admin.cluster.fetch("mine", 0, end, 1 << 20)[0].batch.column("value").to_pylist() == [b"victim"]
    assert instance.process.poll() is None
    assert time.monotonic() - started < 300


# -- the fabric protocol --------------------------------------------------------------------------------------
PROTOCOL_EXAMPLES = 300


def plain(value: Any) -> Any:
    """`value` as plain JSON: tuples as arrays, a dict with other than string keys as [key, value] pairs."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: plain(v) for k, v in value.items()}
        return [[plain(k), plain(v)] for k, v in value.items()]
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def header_bytes(draw: Any, kind: str, args: dict[str, Any]) -> bytes:
    """A request header for `args` (four times in five), or junk, an array for the arguments, a mutation."""
    encoded = json.dumps({"id": draw(st.integers(1, 2**40)), "type": kind, "args": plain(args)}).encode()
    twist = draw(st.integers(0, 9))
    if twist == 0:
        return draw(st.binary(max_size=64))
    if twist == 1:
        return json.dumps({"id": 1, "type": kind, "args": plain(draw(json_values))}).encode()
    if twist == 2:
        position = draw(st.integers(0, len(encoded) - 1))
        return encoded[:position] + bytes([draw(st.integers(0, 255))]) + encoded[position + 1:]
    return encoded


PAYLOADS = {  # by name: a failing example shows the name, not megabytes
    "rows": lambda: wire.ipc_bytes(stored([b"p"])), "typed": lambda: wire.ipc_bytes(stored([{"user": "u", "amount": 2}],
                                                                                        TYPED)),
    "not-stored": lambda: wire.ipc_bytes(pa.record_batch([[1]], names=["value"])),
    "2MB": lambda: wire.ipc_bytes(stored([b"x" * 2_000_000])), "junk": lambda: b"junk", "none": lambda: b""}


@st.composite
def protocol_requests(draw: Any) -> tuple[bytes, str]:
    """(header, payload name) of a fabric protocol request: produce, fetch, commits, lookups, the cluster's metadata
    or an unknown type, with arguments drawn by name (or those of a well-formed client of the fuzz principal) and
    rows, junk or nothing."""
    if not draw(st.integers(0, 3)):  # a produce a correct client of the fuzz principal could send
        args = {"topic": "mine", "partition": draw(st.integers(0, 1)), "codec": draw(st.sampled_from(["none", "lz4"]))}
        return json.dumps({"id": draw(st.integers(1, 2**40)), "type": "produce", "args": args}).encode(), "rows"
    kind = draw(mostly(st.sampled_from(["produce", "produce", "fetch", "commit_offsets", "committed", "topic",
                                        "describe_cluster", "list_topics", "offset_for_time", "echo"]),
                       st.text(max_size=10)))
    if kind == "produce":
        args = draw(arguments(Broker.append)) if draw(st.booleans()) else {
            "topic": "mine", "partition": draw(st.integers(0, 1)), "codec": draw(BY_NAME["codec"]),
            **({"producer_id": draw(st.sampled_from(VICTIMS)), "producer_epoch": draw(st.integers(-1, 2)),
                "base_sequence": draw(st.integers(0, 3))} if draw(st.booleans()) else {})}
        args.pop("rows", None)
    elif kind == "fetch":
        args = draw(arguments(Broker.fetch))
    elif kind == "commit_offsets":
        args = {"group": draw(texts), "offsets": draw(st.lists(st.tuples(names, ints, ints), max_size=3)
                                                      | json_values)}
    elif kind in ("committed", "topic"):
        args = {"group": draw(texts)} if kind == "committed" else {"name": draw(names)}
    elif kind == "offset_for_time" and draw(st.booleans()):
        args = {"topic": draw(names), "partition": draw(ints), "timestamp_us": draw(ints)}
    else:
        args = draw(st.dictionaries(st.text(max_size=6), json_values, max_size=3))
    names_ = st.sampled_from(sorted(PAYLOADS))
    return header_bytes(draw, kind, args), draw(mostly(st.just("rows"), names_) if kind == "produce" else names_)


@st.composite
def broken_streams(draw: Any) -> bytes:
    """Bytes after a good hello that break the framing: an oversized frame's start, a frame cut short, a gRPC
    client's preface, a header length past its frame, junk."""
    header, payload_name = draw(protocol_requests())
    payload = PAYLOADS[payload_name]()
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return protocol_frames.PREFIX.pack(4 + len(header) + (200 << 20), len(header)) + header
    if kind == 1:
        data = protocol_frames.encode(header, payload)
        return data[:draw(st.integers(0, len(data) - 1))]
    if kind == 2:
        return b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    if kind == 3:
        return protocol_frames.PREFIX.pack(8, 100) + b"1234"
    return draw(st.binary(min_size=1, max_size=200))


def protocol_hello(token: str, version: int = 1) -> bytes:
    return protocol_frames.encode(json.dumps({"id": 0, "type": "hello", "args": {
        "protocol": "fabric", "version": version, "token": token}}).encode())


def exchange(address: str, data: bytes) -> list[dict[str, Any]]:
    """Send raw bytes on a new connection, close our side, and read every answer until the server closes."""
    host, _, port = address.rpartition(":")
    reader, answers = protocol_frames.FrameReader(), []
    with socket.create_connection((host, int(port)), timeout=30) as raw:
        try:
            raw.sendall(data)
            raw.shutdown(socket.SHUT_WR)
        except OSError:  # the server refused and closed before it read everything
            pass
        try:
            while received := raw.recv(1 << 16):
                reader.feed(received)
                answers += [json.loads(f.header) for f in reader.frames()]
        except ConnectionResetError:
            pass
    return answers


def test_fuzzed_protocol_requests_never_break_the_service(fuzzed) -> None:
    instance, admin = fuzzed
    address = instance.status(token=ADMIN).protocol_address
    before = protected(admin)

    @settings(max_examples=PROTOCOL_EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.integers(0, 9), protocol_requests(), broken_streams(),
           st.sampled_from([FUZZ] * 8 + ["stolen-token", ""]), st.sampled_from([1] * 9 + [0, 2]))
    def call(mode: int, request: tuple[bytes, str], broken: bytes, token: str, version: int) -> None:
        header, payload = request
        data = protocol_hello(token, version) + (
            broken if mode == 0 else protocol_frames.encode(header, PAYLOADS[payload]()))
        for answer in exchange(address, data):
            error = answer.get("error")
            if error is not None:
                cls = getattr(errors, str(error.get("type")), None)
                assert isinstance(cls, type) and issubclass(cls, errors.FabricError), error
                assert len(str(error.get("message"))) < 4000  # an error never echoes a large input
        assert protected(admin) == before
        assert admin.cluster.connection.status_of(instance.address).active

    call()
    assert_usable(admin)
    assert sum(admin.cluster.partition_state("mine", p).end_offset for p in (0, 1)) > 2, \
        "no fuzzed produce was admitted: the fuzzer did not exercise the write path"
    with fabric.connect(instance.url(f"token={FUZZ}")) as fuzz:  # a well-formed client still works, over it
        assert fuzz.cluster.coordinator.topic("mine").partitions == 2
        assert fuzz.cluster.protocol.clients._connections, "the client did not use the fabric protocol"
    assert instance.process.poll() is None
