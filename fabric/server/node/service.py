"""A data node's Flight service: the data plane of the partitions it leads.

DoPut `append` ({topic, partition, codec, leader_epoch, acks, timeout_ms, producer fields, transactional,
transactional_id}) appends stored rows, under a producer id of the caller's only (fabric.server.producer_owners);
a transactional append needs write on its transactional id too and is verified with the coordinator
(transaction_verification). DoGet ({topic, partition, offset, max_bytes, end_offset, leader_epoch,
isolation_level}) fetches below the high watermark (read_committed: the last stable offset). DoAction runs
`partition_state`, `offset_for_time`, `offset_after_records`, `write_markers` (which needs write on the topic and
on the transactional id, or cluster_action on the cluster: the coordinator aborting timed-out transactions),
`compact_partition`, `enforce_retention` and `delete_records` (admin on the topic: `fabric topics compact`,
`retain` and `delete-records`), `describe_producers` (read on the topic: its open transactions) and `status` for
clients; `abort_open_transaction` for operators (`fabric transactions abort --start-offset`) and, for other nodes,
`offsets_for_leader_epoch` and `replica_range` (asked by a replica repairing a damaged range: one result, this
node's raw frames of the range), which need cluster_action on the cluster resource. The wire format is the
coordinator service's (fabric.server.wire). Every request is checked against the ReplicaManager method it calls,
authenticated and authorized as the coordinator's are (same tokens and ACL files), and refused with
NotLeaderError / FencedLeaderEpochError unless this node leads the partition under the quoted leader epoch.
Produce, fetch, `partition_state` and `write_markers` (the coordinator's calls to leaders), and `offset_for_time`
(a JVM reader's planning), are also served over the fabric protocol (docs/protocol.md) on a port of their own,
named `protocol_address` in the node's status, with the same checks, and so is the followers' `replica_fetch` alone
(it needs cluster_action too; a fetch covers many partitions at once: a JSON answer per partition in the header,
its state or its error, and the frames of those that have some, one after the other, as the payload).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
from typing import Annotated, Any, Callable

import msgspec
import pyarrow as pa
import pyarrow.flight as flight

from fabric.common.errors import FabricError, InvalidRequestError
from fabric.common.redaction import clip
from fabric.server import consumer_fetches, loop_handoff, partition_ops, protocol_handlers, security, wire
from fabric.server.arguments import INT64_MAX, INT64_MIN, check_call
from fabric.server.flight_server import FabricFlightServer, measured, translated
from fabric.server.metrics import ServerMetrics
from fabric.server.node import fetch_sessions, follower_fetches
from fabric.server.node.append_routing import append_waits, refreshes
from fabric.server.node.replica_fetch import ReplicaFetch
from fabric.server.node.replica_manager import ReplicaManager
from fabric.server.node.settings import NodeSettings
from fabric.server.protocol_server import Handler, Payload

log = logging.getLogger(__name__)
ACTIONS = {"partition_state": "describe", "offset_for_time": "describe",  # action -> ACL operation on its topic
           "offset_after_records": "describe", "write_markers": "write", "compact_partition": "admin",
           "enforce_retention": "admin", "delete_records": "admin", "describe_producers": "read"}
# other nodes' calls (followers', and replicas repairing a damaged range), and an operator's abort of a hanging
# transaction (as Kafka's WriteTxnMarkers): on the cluster
REPLICA_ACTIONS = ("offsets_for_leader_epoch", "replica_range", "abort_open_transaction")
# also served over the fabric protocol (the coordinator's calls, and a JVM reader's planning)
PROTOCOL_ACTIONS = ("partition_state", "offset_for_time", "write_markers")
_INT64 = Annotated[int, msgspec.Meta(ge=INT64_MIN, le=INT64_MAX)]
_FETCHED = list[tuple[str, _INT64, _INT64, _INT64, str]]  # replica_fetch's partitions, as its signature types them
Answer = tuple[Any, Payload]  # a protocol request's result and payload


def _fetch_answer(answer: ReplicaFetch | FabricError | None) -> dict[str, Any] | None:
    """One partition's part of a replica fetch's answer: its leader's offsets, or its error (None: unchanged)."""
    if answer is None:
        return None
    if isinstance(answer, FabricError):
        return {"error": wire.error_fields(answer)}
    return {"high_watermark": answer.high_watermark, "log_end": answer.log_end, "log_start": answer.log_start,
            "frames": answer.frames.size}


def _replica_answer(answers: list[ReplicaFetch | FabricError | None]) -> Answer:
    """A protocol replica_fetch's answer: the JSON answer of each partition, and their frames as the payload."""
    return [_fetch_answer(answer) for answer in answers], _frames_payload(answers)


def _session_answer(session_id: int, named: list[fetch_sessions.Named]) -> Answer:
    """A session replica_fetch's answer: the session's id and `[topic, partition, answer]` for each partition it
    carries, and their frames as the payload."""
    return ({"session_id": session_id, "partitions": [[topic, partition, _fetch_answer(answer)]
                                                      for topic, partition, answer in named]},
            _frames_payload([answer for *_, answer in named]))


def _frames_payload(answers: list[ReplicaFetch | FabricError | None]) -> Payload:
    """The frames of a replica fetch's partitions, one after the other in their order: a protocol answer's
    payload (a single partition's frames as they are, without a copy)."""
    frames = [a.frames for a in answers if isinstance(a, ReplicaFetch) and a.frames.size]
    if len(frames) == 1:
        return frames[0]
    return b"".join(memoryview(f) for f in frames)


def _session_args(args: dict[str, Any]) -> fetch_sessions.SessionArgs | None:
    """A protocol replica_fetch's `session` argument, taken out of `args` and checked (None: no session)."""
    if "session" not in args:
        return None
    try:
        return msgspec.convert(args.pop("session"), fetch_sessions.SessionArgs, strict=True)
    except msgspec.ValidationError as exc:
        raise InvalidRequestError(f"request 'replica_fetch': argument 'session' must be {{\"id\": int from 0, "
                                  f"\"epoch\": int from 0, \"forgotten\": [[topic, partition], ...]}}: {exc}") from None


def _checked_fetch_args(args: dict[str, Any]) -> None:
    """A protocol replica_fetch's arguments checked as ReplicaManager.replica_fetch takes them, `partitions` (JSON
    arrays) made the tuples the DoAction's tagged JSON gives. A follower names every partition it copies from this
    node in every fetch, so `partitions` is checked and converted by msgspec, in C (0.09 ms for 1,000 partitions,
    0.8 ms in the signature check's Python loop); only a list it refuses goes through the signature check, whose
    error names what is wrong."""
    partitions = args.get("partitions")
    if isinstance(partitions, list):
        try:
            args["partitions"] = msgspec.convert(partitions, _FETCHED, strict=True)
        except msgspec.ValidationError:
            args["partitions"] = [tuple(p) if isinstance(p, list) else p for p in partitions]
        else:
            check_call("replica_fetch", ReplicaManager.replica_fetch,
                       {name: value for name, value in args.items() if name != "partitions"}, skip=("partitions",))
            return
    check_call("replica_fetch", ReplicaManager.replica_fetch, args)


def _held_fetch(fetch: follower_fetches.FollowerFetch | fetch_sessions.SessionFetch, answer: Callable[[], Answer]
                ) -> Answer | concurrent.futures.Future[Answer]:
    """`answer()` at once if `fetch` does not wait; else a future of it, completed on this event loop when the
    fetch is woken or its wait is over."""
    loop = asyncio.get_running_loop()
    held: concurrent.futures.Future[Answer] = concurrent.futures.Future()

    def complete() -> None:
        if held.done():
            return
        timer.cancel()
        try:
            held.set_result(answer())
        except Exception as exc:  # noqa: BLE001 (answered as the error it is)
            held.set_exception(exc)

    def woken() -> None:  # on the appending thread, under the partition's lock
        try:
            loop_handoff.call_soon(loop, complete)
        except RuntimeError:  # the loop is closed: the server shut down, the fetch with it
            pass
    if not fetch.hold(woken):
        return answer()
    timer = loop.call_later(fetch.wait_s, complete)
    return held


class NodeService(FabricFlightServer):
    """The Flight server of one data node over its `replicas`."""

    def __init__(self, settings: NodeSettings, replicas: ReplicaManager, metrics: ServerMetrics) -> None:
        self.settings, self.replicas = settings, replicas
        self.node_epoch = 0
        self.sockets = settings
        super().__init__(settings.listen, settings.tokens_file, settings.acl_file, settings.tls_cert,
                         settings.tls_key, metrics)
        self.fetch_sessions = fetch_sessions.FetchSessions(replicas)  # (the protocol's event loop only)
        self.protocol = protocol_handlers.start(self, settings.listen.rpartition(":")[0], {
            "produce": protocol_handlers.produce(self, ReplicaManager.append_held, replicas.append_held,
                                                 replicas.topic, self._produce_waits),
            "fetch": Handler(self._fetch, lambda args: refreshes(replicas, args)),
            **{name: self._protocol_action(name) for name in PROTOCOL_ACTIONS},
            "replica_fetch": Handler(self._replica_fetch, lambda args: False)})

    @property
    def address(self) -> str:
        return self.settings.advertise_address(self.port)

    @property
    def protocol_address(self) -> str:
        """Where this node serves the fabric protocol (docs/protocol.md)."""
        return self.settings.advertise_address(self.protocol.port) if self.protocol is not None else ""

    @property
    def server_name(self) -> str:
        return f"node {self.settings.node_id}"

    @translated
    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> list[bytes | flight.Result]:
        args = wire.action_args(action.body)
        if action.type == "status":
            check_call("status", NodeService.status, args)
            self.authorize(context, [])
            status, principal = self.status(), self.principal(context)
            status["topics"] = {topic: config for topic, config in status["topics"].items()  # as the coordinator's
                                if self.authorizer.allowed(principal, "describe", f"topic:{topic}")}  # topic route
            return [wire.dumps(status)]
        if action.type not in ACTIONS and action.type not in REPLICA_ACTIONS:
            raise InvalidRequestError(f"unknown node action {clip(action.type, 60)}; known: "
                                      f"{', '.join(sorted([*ACTIONS, *REPLICA_ACTIONS, 'status']))}")
        result = self.run_action(self.principal(context), action.type, args)
        if action.type == "replica_range":  # the raw frames
            return [flight.Result(result)]
        return [wire.dumps(result)]

    def run_action(self, principal: str, name: str, args: dict[str, Any]) -> Any:
        """Action `name` (of ACTIONS or REPLICA_ACTIONS) by `principal`, over any transport: its arguments checked
        against the ReplicaManager method, then authorized (cluster_action on the cluster for other nodes' calls,
        and for markers written by the coordinator; else the action's operation on the topic, and write on the
        transactional id it names), then run."""
        check_call(name, getattr(ReplicaManager, name), args)
        checks: list[tuple[str, str]]
        if name in REPLICA_ACTIONS:
            checks = [("cluster_action", security.CLUSTER)]
        elif name == "write_markers" and self.authorizer.allowed(principal, "cluster_action", security.CLUSTER):
            checks = []  # the coordinator's markers: cluster_action, just checked
        else:
            checks = [(ACTIONS[name], f"topic:{args['topic']}"), *(
                [("write", f"transactional-id:{args['transactional_id']}")] if "transactional_id" in args else [])]
        self.authorizer.check(principal, checks)
        return getattr(self.replicas, name)(**args)

    def _protocol_action(self, name: str) -> Handler:
        """The fabric protocol request of action `name`: its arguments, its JSON result (run_action)."""
        def serve(principal: str, args: dict[str, Any], payload: Payload) -> tuple[Any, Payload]:
            return self.run_action(principal, name, args), b""
        return Handler(serve)

    def _produce_waits(self, args: dict[str, Any]) -> bool:
        """Whether a produce runs on a worker thread (append_routing; also one whose producer id's owner is not
        cached, which asks the coordinator)."""
        owners = self.producer_owners
        return append_waits(self.replicas, args) or (owners is not None and not owners.known(args.get("producer_id")))

    def _fetch(self, principal: str, args: dict[str, Any], payload: Payload
               ) -> Answer | concurrent.futures.Future[Answer]:
        """`fetch` over the fabric protocol. On the event loop (no refresh from the controller first: append_routing
        .refreshes), one that finds nothing and may wait (max_wait_ms) is held there until its partition has
        something for it (consumer_fetches: woken by PartitionReplica.watch_readable); on a worker thread it waits
        there, as a Flight DoGet does."""
        def watched() -> consumer_fetches.Watched:
            leader_epoch, from_follower = args.get("leader_epoch"), bool(args.get("from_follower", False))
            replica = self.replicas.replica(args["topic"], args["partition"], leader_epoch, from_follower,
                                            args.get("topic_id", ""))
            offset = args["offset"]
            isolation = partition_ops.isolation_level(args.get("isolation_level", "read_committed"))
            return consumer_fetches.Watched(replica.name, lambda woken: replica.watch_readable(
                woken, offset, leader_epoch, from_follower, isolation), replica.unwatch_readable)
        return consumer_fetches.serve(
            self, principal, args, ReplicaManager.fetch, self.replicas.fetch,
            lambda fetched: protocol_handlers.fetch_answer(fetched, lambda: self.topic_schema(args["topic"])), watched)

    def _replica_fetch(self, principal: str, args: dict[str, Any], payload: Payload
                       ) -> Answer | concurrent.futures.Future[Answer]:
        """`replica_fetch` over the fabric protocol, checked (ReplicaManager.replica_fetch's arguments, and a fetch
        session's) and authorized (cluster_action) on the event loop, and answered there: a JSON answer per
        partition (in a fetch session, per partition it carries: fetch_sessions), and their frames as the payload.
        A fetch that waits holds no thread: its answer is a future, completed on the loop when an append or a
        leadership change wakes it, or when max_wait_ms is over."""
        session = _session_args(args)
        _checked_fetch_args(args)
        self.authorizer.check(principal, [("cluster_action", security.CLUSTER)])
        if session is None:
            fetch = follower_fetches.FollowerFetch(self.replicas, **args)
            return _held_fetch(fetch, lambda: _replica_answer(fetch.finish()))
        args.pop("omit_unchanged", None)  # (what a session does anyway)
        in_session = self.fetch_sessions.fetch(session=session, **args)
        return _held_fetch(in_session, lambda: _session_answer(in_session.session_id, in_session.finish()))

    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        return [(name, f"node.{name}") for name in sorted([*ACTIONS, *REPLICA_ACTIONS, "status"])]

    def status(self) -> dict[str, Any]:
        """This node's id, address, epochs, process id, metrics port, the partitions it leads, every replica's
        replication state, its replica fetchers (one per leader node it copies from), how many followers' fetch
        sessions it holds, and the config overrides it applies to each topic it hosts (a caller sees those of the
        topics it may describe)."""
        return {"node_id": self.replicas.node_id, "address": self.address, "node_epoch": self.node_epoch,
                "pid": os.getpid(),
                "metrics_port": self.metrics.port, "protocol_address": self.protocol_address,
                "controller_epoch": self.replicas.controller_epoch,
                "leaders": [list(tp) for tp in self.replicas.leaders()], "replicas": self.replicas.describe(),
                "fetchers": self.replicas.fetchers(), "fetch_sessions": len(self.fetch_sessions),
                "topics": self.replicas.topic_configs()}

    @translated
    @measured("produce")
    def do_put(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor,
               reader: flight.MetadataRecordBatchReader, writer: flight.FlightMetadataWriter) -> None:
        request = wire.request_args(descriptor.command, "DoPut descriptor")
        op = request.pop("op", None)
        if op != "append":
            raise InvalidRequestError(f"unknown node put {clip(op, 60)}; a data node takes only append")
        offset = self.serve_append(context, request, reader, ReplicaManager.append_held, self.replicas.append,
                                   self.replicas.topic)
        writer.write(pa.py_buffer(wire.dumps(offset)))

    def topic_schema(self, topic: str) -> pa.Schema:
        return self.replicas.topic(topic).stored_schema

    @translated
    @measured("fetch")
    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.GeneratorStream:
        return self.serve_fetch(context, ticket, ReplicaManager.fetch, self.replicas.fetch, self.topic_schema)
