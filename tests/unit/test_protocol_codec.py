"""The fabric protocol's codec (fabric.common.protocol): frames cut from a byte stream however it is split,
headers and values round trip, Arrow payloads round trip, and broken or oversized frames are refused with the
error that names the request and the fix."""
from __future__ import annotations

from typing import Any

import msgspec
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabric.common.errors import InvalidRequestError
from fabric.common.protocol import frames, messages, payloads
from fabric.common.protocol.cluster import cluster_json, cluster_of
from fabric.common.types import (
    ClusterDescription,
    Fetched,
    LeaderAndIsr,
    NodeInfo,
    PartitionAssignment,
    PartitionRegistration,
    TopicInfo,
)

headers = st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=20) | st.none(), max_size=4)
json_args = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20),
                         lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                      max_size=3), max_leaves=10)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=300), st.binary(max_size=3000)), min_size=1, max_size=6),
       st.lists(st.integers(1, 700), min_size=1, max_size=20))
def test_frames_come_out_whole_however_the_stream_is_split(parts, cuts) -> None:
    stream = b"".join(frames.encode(header, payload) for header, payload in parts)
    reader = frames.FrameReader()
    out: list[frames.Frame] = []
    position = 0
    for cut in cuts * (len(stream) // max(sum(cuts), 1) + 1):
        reader.feed(stream[position:position + cut])
        position += cut
        out += reader.frames()
        if position >= len(stream):
            break
    assert [(f.header, f.payload) for f in out] == parts
    assert reader.pending == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=40), st.binary(max_size=600)), min_size=1, max_size=6),
       st.lists(st.integers(1, 300), min_size=1, max_size=20), st.lists(st.booleans(), min_size=1, max_size=20))
def test_large_frames_come_out_whole_in_buffers_of_their_own_fed_or_received_into(parts, cuts, into) -> None:
    """A large frame's payload (here from 200 bytes) is filled in place, by recv_into through receive_buffer or
    by feed, the frames after it in the same delivery kept: the same frames come out, large ones as Arrow buffers."""
    stream = b"".join(frames.encode(header, payload) for header, payload in parts)
    reader = frames.FrameReader(large=200)
    out: list[frames.Frame] = []
    position, step = 0, 0
    while position < len(stream):
        cut, step = cuts[step % len(cuts)], step + 1
        target = reader.receive_buffer()
        if target is not None and into[step % len(into)]:  # a socket's recv_into: at most the payload's rest
            count = min(cut, len(target), len(stream) - position)
            target[:count] = stream[position:position + count]
            reader.received(count)
        else:
            count = min(cut, len(stream) - position)
            reader.feed(stream[position:position + count])
        position += count
        out += reader.frames()
    assert [(f.header, bytes(f.payload)) for f in out] == parts
    for frame, part in zip(out, parts, strict=True):  # (one that arrived whole in one piece is cut out as bytes)
        size = len(frames.encode(*part))
        assert isinstance(frame.payload, pa.Buffer) == (size >= 200) or 200 <= size <= max(cuts), size
    assert reader.pending == 0 and reader.receive_buffer() is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=40), st.binary(max_size=600)), min_size=1, max_size=6),
       st.lists(st.integers(1, 300), min_size=1, max_size=20))
def test_an_event_loops_reads_land_in_large_payloads_or_the_threads_buffer_shared_by_its_connections(parts,
                                                                                                      cuts) -> None:
    """Two connections of one loop read by turns (BufferedProtocol: read_buffer, then read_into): a large frame's
    payload is read into in place (the buffer given is its Arrow memory), other bytes through the thread's read
    buffer, which both share, and each connection gets its own frames whole."""
    parts = [*parts, (b"large", bytes(range(256)) * 3)]  # (longer than any read: read in place, at least in part)
    stream = b"".join(frames.encode(header, payload) for header, payload in parts)
    readers = [frames.FrameReader(large=200), frames.FrameReader(large=200)]
    out: list[list[frames.Frame]] = [[], []]
    positions, step, in_place = [0, 0], 0, 0
    while min(positions) < len(stream):
        cut, step = cuts[step % len(cuts)], step + 1
        for i, reader in enumerate(readers):
            target = reader.read_buffer()
            count = min(cut, len(target), len(stream) - positions[i])
            in_place += isinstance(target.obj, pa.Buffer)  # (the thread's read buffer is a bytearray)
            target[:count] = stream[positions[i]:positions[i] + count]
            reader.read_into(count)
            positions[i] += count
            out[i] += reader.frames()
    for got in out:
        assert [(f.header, bytes(f.payload)) for f in got] == parts
    assert all(r.pending == 0 for r in readers)
    assert in_place


def test_an_arrow_buffer_payload_is_framed_through_a_view_of_it() -> None:
    payload = pa.py_buffer(bytes(range(256)) * 4)
    parts = frames.encode_parts(b'{"id": 7}', payload)
    assert isinstance(parts[-1], memoryview) and parts[-1].obj is payload  # not copied
    assert b"".join(parts) == frames.encode(b'{"id": 7}', payload) == frames.encode(b'{"id": 7}', payload.to_pybytes())


def test_a_large_frame_cut_short_is_pending_and_never_handed_on() -> None:
    frame = frames.encode(b'{"id": 1}', bytes(range(256)) * 8)
    reader = frames.FrameReader(large=1000)
    reader.feed(frame[:100])
    assert reader.next() is None and reader.pending == 100
    target = reader.receive_buffer()
    assert target is not None and len(target) == len(frame) - 100
    target[:50] = frame[100:150]
    reader.received(50)
    assert reader.next() is None and reader.pending == 150  # the connection closes here: 150 bytes of a frame


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**63 - 1), st.sampled_from(messages.TYPES) | st.text(max_size=20),
       st.dictionaries(st.text(max_size=10), json_args, max_size=5))
def test_request_headers_round_trip(request_id, kind, args) -> None:
    request = messages.decode_request(messages.encode_request(request_id, kind, args))
    assert (request.id, request.type, messages.decode_args(request)) == (request_id, kind, args)


@settings(max_examples=100, deadline=None)
@given(st.integers(-1, 2**63 - 1), json_args, headers)
def test_answers_round_trip(request_id, result, error) -> None:
    answer = messages.decode_answer(messages.encode_result(request_id, result))
    assert (answer.id, messages.decode_result(answer.result, Any), answer.error) == (request_id, result, None)
    refused = messages.decode_answer(messages.encode_error(request_id, error))
    assert (refused.id, refused.error) == (request_id, error)


@pytest.mark.parametrize("schema", [None, pa.schema([("user", pa.string()), ("amount", pa.int64())])])
def test_topic_metadata_round_trips_with_its_schema(schema) -> None:
    info = TopicInfo("t", 3, {"retention.ms": "1000"}, schema, "an-id")
    answer = messages.decode_answer(messages.encode_result(7, info))
    assert messages.decode_result(answer.result, TopicInfo) == info


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.text("abc.-_09", min_size=1, max_size=10), st.integers(0, 2**31 - 1),
                          st.permutations([1, 2, 3]),
                          st.integers(0, 3), st.booleans(), st.integers(0, 2**31 - 1)), max_size=6),
       st.lists(st.sampled_from(["rack-a", "rack-b"]) | st.none(), min_size=3, max_size=3))
def test_cluster_metadata_round_trips_as_plain_json(partitions, racks) -> None:
    """describe_cluster's answer: offline leaders, reassignment targets and racks (or none) come back as they were,
    with no tagged values a JVM client would have to know."""
    registrations = {(topic, number): PartitionRegistration(
        PartitionAssignment(tuple(replicas), tuple(replicas[:2]) if moving else ()),
        LeaderAndIsr(None if leader == 0 else replicas[leader - 1], epoch, tuple(replicas[max(leader - 1, 0):]),
                     epoch + 1, 4)) for topic, number, replicas, leader, moving, epoch in partitions}
    description = ClusterDescription(4, tuple(NodeInfo(i, f"127.0.0.1:{9000 + i}", racks[i - 1], i, i != 2, f"dir-{i}")
                                              for i in (1, 2, 3)),
                                     registrations, {topic: f"id-{topic}" for topic, *_ in registrations})
    header = messages.encode_result(3, cluster_json(description))
    assert b'"$"' not in header
    assert cluster_of(messages.decode_answer(header).result) == description


def test_a_payload_in_parts_is_framed_part_by_part_without_a_copy() -> None:
    parts_in = (b"ab", pa.py_buffer(b"cdef"), b"")
    parts = frames.encode_parts(b'{"id": 7}', parts_in)
    assert isinstance(parts[3], memoryview) and parts[3].obj is parts_in[1]
    assert b"".join(parts) == frames.encode(b'{"id": 7}', b"abcdef")


@settings(max_examples=50)
@given(st.lists(st.tuples(st.lists(st.binary(max_size=100) | st.none(), min_size=0, max_size=5), st.booleans()),
                max_size=4))
def test_a_fetch_answer_sends_stored_messages_as_they_are_in_one_arrow_stream(runs) -> None:
    """A fetch answer's stream (payloads.fetched_stream): the runs that carry their stored IPC message go out as
    those bytes, the others encoded; any Arrow IPC reader reads the whole as the batches it holds."""
    schema = pa.schema([("value", pa.binary())])
    batches = [pa.record_batch([pa.array(values, pa.binary())], schema=schema) for values, _ in runs]
    fetched = [Fetched(i, batch, 0, batch.serialize() if stored else None)
               for i, (batch, (_, stored)) in enumerate(zip(batches, runs, strict=True))]
    parts = payloads.fetched_stream(schema, fetched)
    for part, run in zip(parts[1:-1], fetched, strict=True):
        assert run.message is None or part is run.message  # (sent as it lies, not encoded again)
    whole = joined(parts)
    assert payloads.read_stream(whole, "a test") == (schema, batches)
    assert pa.ipc.open_stream(whole).read_all() == pa.ipc.open_stream(joined(payloads.ipc_stream(schema, batches))
                                                                      ).read_all()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.binary(max_size=100) | st.none(), min_size=0, max_size=5), max_size=4))
def test_arrow_payloads_round_trip(columns) -> None:
    schema = pa.schema([("value", pa.binary())])
    batches = [pa.record_batch([pa.array(values, pa.binary())], schema=schema) for values in columns]
    assert payloads.read_stream(joined(payloads.ipc_stream(schema, batches)), "a test") == (schema, batches)


def test_a_produce_payload_is_the_bytes_a_stream_writer_writes() -> None:
    """payloads.ipc_stream's parts (the schema's message kept from earlier requests, each batch's message) join
    into the very bytes pyarrow's stream writer writes, so any Arrow reader takes them."""
    schema = pa.schema([("key", pa.binary()), ("value", pa.binary())])
    batches = [pa.record_batch([pa.array([b"k", None]), pa.array([b"v", b"w"])], schema=schema).slice(1)]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(batches[0])
    for _ in range(2):  # the second time, the schema's message comes from the cache
        assert joined(payloads.ipc_stream(schema, batches)) == sink.getvalue().to_pybytes()


def test_a_schemas_message_is_kept_for_that_very_schema_object(monkeypatch) -> None:
    """The schema messages are kept by the schema object's identity (hashing a schema costs more than serializing
    it): each stream carries its own schema's message, whichever schemas came before, however many, and an entry
    left under an id by another schema object is never taken for this one's."""
    monkeypatch.setattr(payloads, "_MESSAGES", {})
    schemas = [pa.schema([(f"c{i}", pa.int64() if i % 2 else pa.string())]) for i in range(300)]
    for schema in [*schemas, *reversed(schemas)]:
        sent = joined(payloads.message_stream(schema, []))
        assert pa.ipc.open_stream(sent).schema.equals(schema)
        assert len(payloads._MESSAGES) <= payloads._MAX_SCHEMAS
    one, other = pa.schema([("a", pa.int64())]), pa.schema([("b", pa.string())])
    payloads._MESSAGES[id(one)] = (other, other.serialize())  # as if `other` had had one's id
    assert pa.ipc.read_schema(payloads._schema_message(one)).equals(one)
    assert payloads._schema_message(one) is payloads._schema_message(one)  # kept: serialized once


def joined(parts: tuple[bytes | pa.Buffer, ...]) -> bytes:
    """A payload's parts as the bytes a frame carries."""
    return b"".join(memoryview(p) if isinstance(p, pa.Buffer) else p for p in parts)


def test_an_oversized_frame_is_refused_once_its_header_names_the_request() -> None:
    reader = frames.FrameReader(limit=1000)
    data = frames.encode(messages.encode_request(42, "produce", {"topic": "t"}), b"x" * 2000)
    reader.feed(data[:10])
    assert reader.next() is None  # the header has not arrived: nothing to name yet
    reader.feed(data[10:60])
    with pytest.raises(frames.FrameError, match="over socket.request.max.bytes=1000 of this server; nothing of it "
                                                "was written") as refused:
        reader.next()
    assert messages.request_id(refused.value.header) == 42


@pytest.mark.parametrize("data, match", [
    (frames.PREFIX.pack(2, 0), "cannot hold a header"),
    (frames.PREFIX.pack(10, 20), "cannot hold a header"),
    (frames.PREFIX.pack(frames.MAX_HEADER_BYTES + 10, frames.MAX_HEADER_BYTES + 1), "header is .* over the limit"),
    (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "a gRPC \\(Arrow Flight\\) client .* point it at the server's Flight port"),
])
def test_bytes_that_are_no_frames_are_refused(data, match) -> None:
    reader = frames.FrameReader()
    reader.feed(data)
    with pytest.raises(frames.FrameError, match=match):
        reader.next()


@pytest.mark.parametrize("header, match", [
    (b"junk", "not a fabric protocol request"),
    (b'{"id": 1}', "not a fabric protocol request"),
    (b'{"id": "1", "type": "echo"}', "not a fabric protocol request"),
    (b'{"id": 1, "type": "echo", "extra": 1}', "not a fabric protocol request"),
    (b'{"id": 1, "type": "echo", "args": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
     "not a fabric protocol request"),  # deeper than the decoder follows: named, not a RecursionError
])
def test_malformed_request_headers_are_named(header, match) -> None:
    with pytest.raises(InvalidRequestError, match=match):
        messages.decode_request(header)
    assert messages.request_id(header) == -1


def test_an_answer_nested_deeper_than_the_decoder_follows_is_a_decode_error() -> None:
    """A client reading a broken (or hostile) server's answer breaks the connection on msgspec's DecodeError."""
    with pytest.raises(msgspec.DecodeError, match="nests deeper"):
        messages.decode_answer(b'{"id": 1, "result": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")


def test_arguments_must_be_an_object_of_text_and_payloads_an_arrow_stream() -> None:
    with pytest.raises(InvalidRequestError, match="arguments of 'fetch' request 3 must be a JSON object"):
        messages.decode_args(messages.decode_request(b'{"id": 3, "type": "fetch", "args": [1, 2]}'))
    with pytest.raises(InvalidRequestError, match="arguments of 'produce' request 4 must be a JSON object"):
        messages.decode_args(messages.decode_request(b'{"id": 4, "type": "produce", "args": {"topic": "m\x95ne"}}'))
    with pytest.raises(InvalidRequestError, match="payload of a produce is not an Arrow IPC stream"):
        payloads.read_stream(b"junk", "a produce")


def _stream_reader(payload: bytes) -> tuple[pa.Schema, list[Any]] | str:
    """What pyarrow's own stream reader reads of `payload` (_valid); "refused" where it refuses it."""
    try:
        reader = pa.ipc.open_stream(payload)
        return _valid(reader.schema, list(reader))
    except (pa.ArrowException, ValueError, OSError):
        return "refused"


def _read(payload: bytes) -> tuple[pa.Schema, list[Any]] | str:
    try:
        return _valid(*payloads.read_stream(payload, "a test"))
    except InvalidRequestError:
        return "refused"


def _valid(schema: pa.Schema, batches: list[pa.RecordBatch]) -> tuple[pa.Schema, list[Any]]:
    """The schema and each batch's rows, or "invalid" for a batch whose buffers do not hold what its schema says
    (a damaged stream can decode to one: the servers check each with validate(full=True) before they use it)."""
    rows: list[Any] = []
    for batch in batches:
        try:
            batch.validate(full=True)
        except pa.ArrowInvalid:
            rows.append("invalid")
            continue
        rows.append(batch.to_pylist())
    return schema, rows


SHAPES = {"plain": pa.schema([("value", pa.binary())]),
          "typed": pa.schema([("key", pa.binary()), ("value", pa.struct([("n", pa.int64()), ("s", pa.string())]))]),
          "dictionary": pa.schema([("value", pa.dictionary(pa.int32(), pa.string()))])}


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(SHAPES)), st.lists(st.integers(0, 4), max_size=3), st.booleans(),
       st.integers(0, 10_000), st.integers(0, 255) | st.none())
def test_a_stream_is_read_as_a_stream_reader_reads_it_whole_cut_or_damaged(shape, sizes, end_marker, cut, flip
                                                                           ) -> None:
    """payloads.read_stream reads a stream whose schema message it met before without a stream reader
    (_read_known): whatever the stream (any schema, no batch or several, with or without its end marker, cut
    anywhere, a byte changed anywhere), it reads the schema and batches pyarrow's stream reader reads, or refuses
    what that reader refuses; twice, so that the second read takes the schema from those met before."""
    schema = SHAPES[shape]
    batches = [pa.RecordBatch.from_pylist([_row(shape, i) for i in range(size)], schema=schema) for size in sizes]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    whole = sink.getvalue().to_pybytes()
    payload = bytearray(whole if end_marker else whole[:-8])
    if cut < len(payload):
        del payload[cut:]
    if flip is not None and payload:
        payload[flip % len(payload)] ^= 0x5A
    expected = _stream_reader(bytes(payload))
    for _ in range(2):
        assert _read(bytes(payload)) == expected


def _row(shape: str, i: int) -> dict[str, Any]:
    if shape == "typed":
        return {"key": b"k%d" % i, "value": {"n": i, "s": "x" * i}}
    return {"value": f"v{i % 2}" if shape == "dictionary" else b"v" * i}
