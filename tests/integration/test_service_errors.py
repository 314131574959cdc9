"""Bad requests to a real coordinator service process: unknown groups, stale generations and malformed
payloads (raw Flight calls) are each answered with an error naming the problem, and change nothing."""
from __future__ import annotations

import re
from typing import Any, Callable

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import fabric
from fabric.common.errors import IllegalGenerationError, InvalidRequestError, UnknownMemberError
from fabric.common.records import to_storage
from fabric.common.types import JoinRequest
from fabric.common.waiting import wait_for
from fabric.server import wire

GROUP, TOPIC = "billing", "orders"


def snapshot(fab) -> dict[str, Any]:
    """Everything a bad request could have changed: topics, their ends, groups, offsets and group states."""
    coordinator = fab.cluster.coordinator
    groups = coordinator.list_groups()
    return {"topics": {t: (coordinator.topic(t), [p.end_offset for p in fab.describe_topic(t).partitions])
                       for t in coordinator.list_topics()},
            "groups": {g: (coordinator.committed(g), coordinator.describe_group(g)) for g in groups + ["ghost"]}}


@pytest.fixture
def live(coordinators):
    """A service with topic `orders` (2 partitions, 3 records), and group `billing` with one Stable member
    that committed offset 1 in partition 0. Yields (fabric, raw flight client, member id, generation)."""
    instance = coordinators()
    with fabric.connect(instance.url()) as fab, flight.connect(f"grpc://{instance.address}") as raw:
        fab.create_topic(TOPIC, partitions=2)
        with fab.producer() as producer:
            for i in range(3):
                producer.send(TOPIC, b"v%d" % i, partition=0)
        coordinator = fab.cluster.coordinator
        joined = wait_for(lambda: (lambda j: j if j.ready else None)(coordinator.join_group(
            JoinRequest(GROUP, "", (TOPIC,), session_timeout_ms=60000))), 30, "the member to join")
        coordinator.sync_group(GROUP, joined.member_id, joined.generation)
        coordinator.commit_offsets(GROUP, {(TOPIC, 0): 1}, generation=joined.generation, member_id=joined.member_id)
        yield fab, raw, joined.member_id, joined.generation


def unchanged(fab, call: Callable[[], Any], error: type[BaseException], match: str) -> None:
    """`call` raises `error` matching `match`, and the fabric's state is the same afterwards."""
    before = snapshot(fab)
    with pytest.raises(error, match=match):
        call()
    assert snapshot(fab) == before


def test_unknown_group_and_stale_generation_are_refused(live) -> None:
    fab, _, member, generation = live
    coordinator = fab.cluster.coordinator
    for call in (lambda: coordinator.heartbeat("ghost", member, generation),
                 lambda: coordinator.sync_group("ghost", member, generation),
                 lambda: coordinator.leave_group("ghost", "nobody")):
        unchanged(fab, call, UnknownMemberError, "is not in the group")
    assert "ghost" not in coordinator.list_groups() and coordinator.describe_group("ghost").state == "Dead"
    stale = generation - 1
    unchanged(fab, lambda: coordinator.commit_offsets(GROUP, {(TOPIC, 0): 3}, generation=stale, member_id=member),
              IllegalGenerationError, f"generation {stale} is stale: the group is at generation {generation}")
    unchanged(fab, lambda: coordinator.heartbeat(GROUP, member, stale), IllegalGenerationError, "is stale")
    unchanged(fab, lambda: coordinator.commit_offsets(GROUP, {(TOPIC, 1): 2}, generation=generation,
                                                      member_id="impostor"), UnknownMemberError, "'impostor'")
    assert coordinator.committed(GROUP)[(TOPIC, 0)].offset == 1
    assert coordinator.describe_group(GROUP).state == "Stable"


def flight_error(call: Callable[[], Any]) -> dict[str, Any]:
    """The {"type", "message"} of the Flight error `call` raises."""
    with pytest.raises(flight.FlightError) as raised:
        call()
    return wire.error_details(raised.value)


def action(raw: flight.FlightClient, name: str, body: bytes) -> Callable[[], Any]:
    return lambda: list(raw.do_action(flight.Action(name, body)))


MALFORMED_ACTIONS = [
    ("commit_offsets", b"{not json", "not valid coordinator wire JSON"),
    ("commit_offsets", b"\xff\xfe", "not valid coordinator wire JSON"),
    ("commit_offsets", b"[1, 2]", "must be a JSON object of named arguments"),
    ("commit_offsets", b'{"group": "billing"}', "must be a tagged value"),
    ("commit_offsets", b'{"$": "dict", "v": [["group", {"$": "nonsense", "v": 1}]]}', "unknown wire tag 'nonsense'"),
    ("commit_offsets", wire.dumps({"group": GROUP}), "missing argument\\(s\\) offsets"),
    ("commit_offsets", wire.dumps({"group": GROUP, "offsets": {(TOPIC, 0): "2"}}), "argument 'offsets' must be"),
    ("commit_offsets", wire.dumps({"group": GROUP, "offsets": {(TOPIC, 0): 2}, "generation": "1"}),
     "argument 'generation' must be int"),
    ("heartbeat", wire.dumps({"group": 7, "member_id": "m", "generation": 1}), "argument 'group' must be str"),
    ("heartbeat", wire.dumps({"group": GROUP, "member_id": "m", "generation": True}), "'generation' must be int"),
    ("delete_topic", wire.dumps({"name": TOPIC, "force": True}), "unknown argument\\(s\\) force"),
    ("join_group", wire.dumps({"request": {"group": GROUP}}), "'request' must be JoinRequest"),
    ("join_group", b'{"$": "dict", "v": [["request", {"$": "JoinRequest", "v": {"group": "g"}}]]}',
     "missing 2 required positional arguments: 'member_id' and 'topics'"),
    ("drop_everything", b"{}", "unknown coordinator action 'drop_everything'"),
]


@pytest.mark.parametrize("name, body, match", MALFORMED_ACTIONS, ids=lambda v: str(v)[:40])
def test_malformed_actions_are_refused(live, name, body, match) -> None:
    fab, raw, _, _ = live
    before = snapshot(fab)
    details = flight_error(action(raw, name, body))
    assert details["type"] == InvalidRequestError.__name__
    assert re.search(match, details["message"]), details["message"]
    assert snapshot(fab) == before


def test_a_mistyped_call_through_the_client_raises_invalid_request(live) -> None:
    fab, _, member, generation = live
    unchanged(fab, lambda: fab.cluster.connection.action("commit_offsets", group=GROUP, offsets={(TOPIC, 0): 2.5},
                                                         generation=generation, member_id=member),
              InvalidRequestError, "argument 'offsets' must be dict\\[tuple\\[str, int\\], int\\], got dict")


def test_malformed_data_plane_requests_are_refused(live) -> None:
    fab, raw, _, _ = live
    rows = to_storage(pa.table({"value": [b"x"]}), None, 1_000_000).to_batches()[0]
    wrong = pa.record_batch([["x"]], names=["value"])

    def put(command: bytes, batch: pa.RecordBatch) -> Callable[[], Any]:
        def run() -> Any:
            writer, answers = raw.do_put(flight.FlightDescriptor.for_command(command), batch.schema)
            writer.write_batch(batch)
            writer.done_writing()
            answers.read()
            writer.close()
        return run

    cases = [
        (lambda: raw.do_get(flight.Ticket(b"garbage")).read_all(), "DoGet ticket is not valid"),
        (lambda: raw.do_get(flight.Ticket(wire.dumps({"topic": TOPIC}))).read_all(),
         "missing argument\\(s\\) partition, offset, max_bytes"),
        (lambda: raw.do_get(wire.fetch_ticket(TOPIC, 0, "zero", 100, None)).read_all(), "'offset' must be int"),
        (put(b"garbage", rows), "DoPut descriptor is not valid"),
        (put(wire.dumps({"op": "truncate", "topic": TOPIC}), rows), "unknown coordinator put 'truncate'"),
        (put(wire.dumps({"op": "append", "topic": TOPIC, "codec": "none"}), rows), "missing argument\\(s\\) partition"),
        (put(wire.put_descriptor("append", topic=TOPIC, partition=0, codec="none").command, wrong),
         "schema"),
        (put(wire.put_descriptor("publish", txn="t1", keys=[[TOPIC, 0]], codec="none").command, rows),
         "publish stream must have the schema"),
        (put(wire.put_descriptor("publish", txn="t1", keys=TOPIC, codec="none").command, rows),
         "list of \\[topic, partition\\] pairs"),
    ]
    for call, match in cases:
        before = snapshot(fab)
        details = flight_error(call)
        assert re.search(match, details.get("message", "")), (match, details)
        assert details["type"] in ("InvalidRequestError", "SchemaMismatchError"), details
        assert snapshot(fab) == before
    assert not fab.cluster.coordinator.transaction_committed("t1")
    assert fab.cluster.append(TOPIC, 1, rows) == 0  # the service still serves good requests
    put(wire.dumps({"op": "append", "topic": TOPIC, "partition": 1}), rows)()  # an argument left out takes its default
    assert fab.describe_topic(TOPIC).partitions[1].end_offset == 2
