"""The coordinator service: a Broker (data and metadata) and the cluster's controller served over Arrow Flight.

DoAction runs the coordinator and admin calls of ROUTES (JSON bodies, see coordinator/wire.py); DoPut appends
(under producer ids of the caller's only: producer_owners.py) or publishes stored rows; DoGet fetches. Every call
is authenticated (coordinator/security.py) and authorized per route. Only the active instance (per the election;
a sqlite-store instance is always active) serves writes, group calls and the controller's calls (data nodes'
registrations and heartbeats, describe_cluster, which need `cluster_action` / nothing on the cluster resource); a
standby answers "not the active coordinator, active is HOST:PORT". Reads, append and fetch of single-directory
topics are served by any instance (the data directory is shared and its storage multi-process safe); replicated
topics' data is on the data nodes. Produce, fetch, commit_offsets, committed and topic are also served over the
fabric protocol (docs/protocol.md, fabric.server.protocol_routes) on a port of their own, named `protocol_address`
in the instance's status, with the same checks.

Run: `fabric coordinator start ...` or `python -m fabric.server.service --listen 127.0.0.1:9093 --data DIR ...`.
"""
from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.flight as flight

from fabric.common import pandas_probe
from fabric.common.errors import AuthorizationError, InvalidRequestError
from fabric.common.redaction import clip
from fabric.common.types import ClusterDescription, transaction_sequence
from fabric.coordinator import validation
from fabric.coordinator.election import NotControllerError
from fabric.coordinator.group_store import GroupMembership
from fabric.coordinator.interface import Coordinator
from fabric.coordinator.offsets_records import OFFSETS_PARTITIONS, offsets_partition
from fabric.coordinator.offsets_topic import TopicOffsets
from fabric.coordinator.transaction_offsets import TransactionOffsets
from fabric.coordinator.transaction_timeouts import TransactionTimeouts
from fabric.server import (
    coordinator_metrics,
    offsets_retention,
    protocol_handlers,
    protocol_routes,
    replicated_offsets,
    security,
    wire,
)
from fabric.server.arguments import check_call
from fabric.server.cluster_broker import ClusterBroker
from fabric.server.connection import server_token
from fabric.server.controller_driver import ControllerDriver
from fabric.server.entry import server_main
from fabric.server.flight_server import FabricFlightServer, measured, translated
from fabric.server.heap import QuietCollector
from fabric.server.instance import (
    Settings,
    add_start_arguments,
    open_store,
    settings_from,
)
from fabric.server.leader_calls import LeaderCalls
from fabric.server.metrics import ServerMetrics
from fabric.server.offsets_ownership import OwnershipWatcher, ServedElsewhereError, share_out
from fabric.server.periodic import Periodic
from fabric.server.producer_owners import ProducerOwners
from fabric.server.request_metrics import count_bytes
from fabric.server.shutdown import Interrupted, Shutdown
from fabric.server.transaction_reaper import TransactionReaper

log = logging.getLogger(__name__)
Checks = Callable[[dict[str, Any]], list[tuple[str, str]]]
Allowed = Callable[[str, str], bool]  # (operation, resource) -> whether the caller may
Filter = Callable[[Any, Allowed], Any]  # a result -> the part of it the caller may see


def on_topic(operation: str, key: str = "name") -> Checks:
    """The ACL check `operation` on topic:<args[key]>."""
    return lambda args: [(operation, f"topic:{args[key]}")]


def on_group(operation: str) -> Checks:
    """The ACL check `operation` on group:<args["group"]>."""
    return lambda args: [(operation, f"group:{args['group']}")]


def nothing(args: dict[str, Any]) -> list[tuple[str, str]]:
    """No ACL check: any authenticated principal may call (listings are filtered instead)."""
    return []


def commit_checks(args: dict[str, Any]) -> list[tuple[str, str]]:
    """Committing offsets needs `group` on the group and `read` on every topic committed in (as Kafka)."""
    return on_group("group")(args) + [("read", f"topic:{t}") for t in sorted({t for t, _ in args["offsets"]})]


def delete_offsets_checks(args: dict[str, Any]) -> list[tuple[str, str]]:
    """Deleting a group's offsets needs `admin` on the group (as deleting it does) and `read` on each topic named
    (as Kafka's OffsetDelete)."""
    named = validation.group_partitions(args["group"], args["partitions"])
    return on_group("admin")(args) + [("read", f"topic:{t}") for t in sorted({t for t, _ in named})]


def transaction_commit_checks(args: dict[str, Any]) -> list[tuple[str, str]]:
    """Committing a transaction needs `write` on its transactional id and, with a group's offsets, what committing
    them needs (commit_checks)."""
    offsets = args.get("offsets")
    if offsets is None:
        return on_transactional_id("write")(args)
    validation.transactional_offsets(offsets)
    return on_transactional_id("write")(args) + commit_checks({"group": offsets.group, "offsets": offsets.offsets})


def on_transactional_id(operation: str) -> Checks:
    """The ACL check `operation` on transactional-id:<the id of args["txn"], `<transactional id>:<sequence>`>."""
    return lambda args: [(operation, transactional_id(args["txn"]))]


def on_named_transactional_id(operation: str) -> Checks:
    """The ACL check `operation` on transactional-id:<args["transactional_id"]>, a bare id."""
    return lambda args: [(operation, f"transactional-id:{args['transactional_id']}")]


def transactional_id(txn: str) -> str:
    """The ACL resource of a transaction id (as Kafka binds a transactional producer's id to an ACL)."""
    return f"transactional-id:{transaction_sequence(txn)[0]}"


def recover_checks(args: dict[str, Any]) -> list[tuple[str, str]]:
    """Recovering topics needs `create` on each (on topic:* to recover every directory)."""
    names = args.get("names")
    return [("create", "topic:*")] if names is None else [("create", f"topic:{n}") for n in names]


def on_cluster(operation: str) -> Checks:
    """The ACL check `operation` on the cluster resource (data nodes' calls need cluster_action, as Kafka's)."""
    return lambda args: [(operation, security.CLUSTER)]


def names_allowed(operation: str, kind: str) -> Filter:
    """A listing of names kept to those the caller may `operation` as resources of `kind`."""
    return lambda names, allowed: [name for name in names if allowed(operation, f"{kind}:{name}")]


def topics_described(description: ClusterDescription, allowed: Allowed) -> ClusterDescription:
    """describe_cluster's partitions kept to the topics the caller may describe (nodes are shown to all)."""
    return replace(description, partitions={tp: reg for tp, reg in description.partitions.items()
                                            if allowed("describe", f"topic:{tp[0]}")},
                   topic_ids={t: i for t, i in description.topic_ids.items() if allowed("describe", f"topic:{t}")})


def of_group(args: dict[str, Any]) -> str:
    return str(args["group"])


def of_join(args: dict[str, Any]) -> str:
    return str(args["request"].group)


def of_offsets(args: dict[str, Any]) -> str | None:
    """The group whose offsets a transaction commits, if any."""
    offsets = args.get("offsets")
    return None if offsets is None else str(offsets.group)


@dataclass(frozen=True)
class Route:
    """One DoAction: the method it calls on the broker, its coordinator or the controller, its ACL checks (or,
    where a data node may call it too, `cluster_action` on the cluster instead), whether only the active
    instance may serve it, (for listings) what filters the result, and whether the method takes the caller's
    principal (`principal`, which the service passes: a request naming one is refused). `group` names the group
    a call is about: where each offsets partition has an instance of its own (fabric.server.offsets_ownership),
    only the instance serving the group's partition serves the call, instead of the active one."""

    target: str
    checks: Checks
    active_only: bool = False
    filter_by: Filter | None = None
    for_nodes: bool = False
    for_caller: bool = False
    group: Callable[[dict[str, Any]], str | None] | None = None


ROUTES: dict[str, Route] = {
    "create_topic": Route("broker", on_topic("create"), True),
    "delete_topic": Route("broker", on_topic("admin"), True),
    "create_partitions": Route("broker", on_topic("admin"), True),
    "recover_topics": Route("broker", recover_checks, True),
    "topic": Route("coordinator", on_topic("describe")),
    "list_topics": Route("coordinator", nothing, filter_by=names_allowed("describe", "topic")),
    "alter_topic_config": Route("coordinator", on_topic("admin"), True),
    "set_partitions": Route("broker", on_topic("admin"), True),
    "commit_offsets": Route("broker", commit_checks, True, group=of_group),
    "committed": Route("coordinator", on_group("describe"), group=of_group),
    "list_groups": Route("coordinator", nothing, filter_by=names_allowed("describe", "group")),
    "delete_group": Route("coordinator", on_group("admin"), True, group=of_group),
    "delete_offsets": Route("coordinator", delete_offsets_checks, True, group=of_group),
    "group_coordinators": Route("service", nothing),
    "commit_transaction": Route("broker", transaction_commit_checks, True, group=of_offsets),
    "transaction_committed": Route("coordinator", on_transactional_id("describe")),
    "list_transactions": Route("coordinator", nothing, filter_by=names_allowed("describe", "transactional-id")),
    "abort_transaction_writers": Route("coordinator", on_named_transactional_id("admin"), True),
    "add_transaction_writer": Route("coordinator", on_transactional_id("write"), True),
    "transaction_record": Route("coordinator", on_named_transactional_id("describe"), True,
                                for_nodes=True),  # a leader checks the markers it is asked for against it
    "verify_transaction_writer": Route("broker", on_named_transactional_id("describe"), True,
                                       for_nodes=True),  # and a transactional append that opens a transaction
    "join_group": Route("coordinator", lambda a: [("group", f"group:{a['request'].group}")], True, group=of_join),
    "sync_group": Route("coordinator", on_group("group"), True, group=of_group),
    "heartbeat": Route("coordinator", on_group("group"), True, group=of_group),
    "leave_group": Route("coordinator", on_group("group"), True, group=of_group),
    "describe_group": Route("coordinator", on_group("describe"), True, group=of_group),
    "partition_state": Route("broker", on_topic("describe", "topic")),
    "offset_for_time": Route("broker", on_topic("describe", "topic")),
    "offset_after_records": Route("broker", on_topic("describe", "topic")),
    "enforce_retention": Route("broker", on_topic("admin", "topic"), True),
    "compact_topic": Route("broker", on_topic("admin", "topic"), True),
    "delete_records": Route("broker", on_topic("admin", "topic"), True),
    "status": Route("service", nothing),
    "init_producer_id": Route("broker", nothing, True, for_caller=True),  # the id is the caller's
    "producer_id_owner": Route("broker", on_cluster("cluster_action")),  # a leader checks appends against it
    "register_node": Route("controller", on_cluster("cluster_action"), True),
    "node_heartbeat": Route("controller", on_cluster("cluster_action"), True),
    "alter_partition": Route("controller", on_cluster("cluster_action"), True),
    "controlled_shutdown": Route("controller", on_cluster("cluster_action"), True),
    "elect_leaders": Route("controller", on_cluster("admin"), True),
    "reassign_partition": Route("controller", on_topic("admin", "topic"), True),
    "describe_cluster": Route("controller", nothing, True, filter_by=topics_described),
}


class CoordinatorService(FabricFlightServer):
    """One coordinator instance: serves `broker` (data in a shared directory, metadata in the store, replicated
    topics through its controller)."""

    def __init__(self, settings: Settings, broker: ClusterBroker, election: Any, metrics: ServerMetrics) -> None:
        self.settings, self.broker, self.election = settings, broker, election
        self.sockets = settings
        super().__init__(settings.listen, settings.tokens_file, settings.acl_file, settings.tls_cert,
                         settings.tls_key, metrics)
        self.producer_owners = ProducerOwners(broker.producer_id_owner)
        self.group_owners: OwnershipWatcher | None = None  # where each offsets partition has an instance of its own
        self.protocol = protocol_handlers.start(self, settings.listen.rpartition(":")[0],
                                                protocol_routes.handlers(self))

    @property
    def instance(self) -> str:
        """This instance's advertised host:port."""
        return self.settings.advertise_address(self.port)

    def translate(self, exc: Exception) -> flight.FlightError:
        """A write the store refused because this instance is no longer the controller is a "not active" answer."""
        if isinstance(exc, ServedElsewhereError):
            return wire.not_active(self.instance, exc.owner, str(exc))
        if isinstance(exc, NotControllerError):
            return wire.not_active(self.instance, self.election.active_instance())
        return super().translate(exc)

    # -- checks ------------------------------------------------------------------------------------
    def _require_active(self) -> None:
        if not self.election.is_active:  # (translated into the answer that names the active instance)
            raise NotControllerError(f"{self.instance} is not the active coordinator")

    def _require_group(self, route: Route, args: dict[str, Any]) -> None:
        """Refuse (sending the caller on) a call this instance may not serve: one about a group whose offsets
        partition another instance serves, else one only the active instance serves."""
        group = route.group(args) if route.group is not None else None
        if group is not None and self.group_owners is not None:
            self.group_owners.require(offsets_partition(group, OFFSETS_PARTITIONS))
        elif route.active_only:
            self._require_active()

    def group_coordinators(self) -> list[str]:
        """The addresses of the instances serving the offsets partitions (where each has an instance of its own;
        else []): a client lists the groups of each."""
        owners = self.group_owners
        return [] if owners is None else sorted({owners.owner_of(p) for p in range(OFFSETS_PARTITIONS)} - {""})

    # -- actions -----------------------------------------------------------------------------------
    @translated
    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> list[bytes]:
        if action.type not in ROUTES:
            raise InvalidRequestError(f"unknown coordinator action {clip(action.type, 60)}; known: "
                                      f"{', '.join(sorted(ROUTES))}")
        return [wire.dumps(self.run_route(self.principal(context), action.type, wire.action_args(action.body)))]

    def run_route(self, principal: str, name: str, args: dict[str, Any]) -> Any:
        """The result of ROUTES[name] called by `principal` with `args`, over any transport: the arguments
        checked against the method's signature, the route's ACL checks, whether this instance is active, and
        (for listings) the result filtered to what the caller may see."""
        route = ROUTES[name]
        check_call(name, getattr(INTERFACES[route.target], name), args,
                   skip=("principal",) if route.for_caller else ())
        try:
            self.authorizer.check(principal, route.checks(args))
        except AuthorizationError:
            if not route.for_nodes:
                raise
            self.authorizer.check(principal, on_cluster("cluster_action")(args))
        self._require_group(route, args)
        if route.for_caller:
            args["principal"] = principal
        target = {"broker": self.broker, "coordinator": self.broker.coordinator, "service": self,
                  "controller": self.broker.controller}[route.target]
        result = getattr(target, name)(**args)
        if route.filter_by is not None:
            result = route.filter_by(result, lambda operation, resource: self.authorizer.allowed(
                principal, operation, resource))
        return result

    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        return [(name, f"{route.target}.{name}") for name, route in sorted(ROUTES.items())]

    def status(self) -> wire.InstanceStatus:
        """Which instance this is, whether it is active, which one is, where it serves metrics, its process id."""
        election, settings = self.election, self.settings
        return wire.InstanceStatus(self.instance, election.is_active, election.active_instance() or "",
                                   election.epoch, settings.store_url, os.path.abspath(settings.data_dir),
                                   settings.tls_cert is not None, self.metrics.port,
                                   settings.advertise_address(self.protocol.port) if self.protocol else "",
                                   tuple(self.group_owners.given()) if self.group_owners else (), os.getpid())

    # -- data plane --------------------------------------------------------------------------------
    @translated
    @measured("produce")
    def do_put(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor,
               reader: flight.MetadataRecordBatchReader, writer: flight.FlightMetadataWriter) -> None:
        request = wire.request_args(descriptor.command, "DoPut descriptor")
        op = request.pop("op", None)
        if op == "append":
            result = self.serve_append(context, request, reader, ClusterBroker.append, self.broker.append,
                                       self.broker.coordinator.topic)
        elif op in wire.PUBLISH_OPS:
            method, _, items = wire.PUBLISH_OPS[op]
            keys = wire.publish_keys(request.pop("keys", None))
            check_call(op, getattr(ClusterBroker, method), request, skip=("parts",))
            self.authorize(context, transaction_commit_checks(request)
                            + [("write", f"topic:{t}") for t in sorted({t for t, _ in keys})])
            self._require_active()
            parts = wire.unwrap(keys, reader, items, self.sockets.socket_request_max_bytes)
            count_bytes(sum(i.size if isinstance(i, pa.Buffer) else i.nbytes for v in parts.values() for i in v))
            result = getattr(self.broker, method)(request.pop("txn"), parts, **request)
        else:
            raise InvalidRequestError(f"unknown coordinator put {clip(op, 60)}; expected append, "
                                      f"{', '.join(wire.PUBLISH_OPS)}")
        writer.write(pa.py_buffer(wire.dumps(result)))

    def topic_schema(self, topic: str) -> pa.Schema:
        """The storage schema of a topic's rows (what an empty fetch answers)."""
        return self.broker.coordinator.topic(topic).stored_schema

    @translated
    @measured("fetch")
    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.GeneratorStream:
        return self.serve_fetch(context, ticket, ClusterBroker.fetch, self.broker.fetch, self.topic_schema)


# Where each route's method is declared: requests are checked against these signatures (coordinator/arguments.py).
INTERFACES: dict[str, type] = {"broker": ClusterBroker, "coordinator": Coordinator, "service": CoordinatorService,
                               "controller": ControllerDriver}


def serve(settings: Settings) -> None:
    """Run one instance until SIGTERM/SIGINT: open the store and the data, join the election, serve; then stop
    within settings.shutdown_timeout_ms (fabric.server.shutdown), even if ZooKeeper or the peers are gone."""
    pandas_probe.settle_without_pandas()
    shutdown = Shutdown(settings.shutdown_timeout_ms / 1000)
    shutdown.install()
    election: Any = None
    broker = server = None
    background: list[TransactionReaper | Periodic] = []  # stopped before the broker
    collector = QuietCollector().start()  # (full collections kept out of the requests' way)
    try:
        store, election = open_store(settings)
        if isinstance(store, GroupMembership):
            store.limit_groups(settings.group_max_session_timeout_ms, settings.group_max_size)
        controller = ControllerDriver(store, settings.node_session_timeout_ms)
        loader = None
        if settings.offsets_replication_factor is not None and isinstance(store, TransactionOffsets):
            loader = replicated_offsets.install(store, controller, settings.offsets_replication_factor,
                                                settings.tls_cert is not None, server_token(settings.token_file),
                                                settings.offsets_topic_segment_bytes)
        broker = ClusterBroker(settings.data_dir, store, settings.max_partitions, controller,
                               settings.default_replication_factor)
        metrics = ServerMetrics()
        offsets_log = loader.topic.log if loader is not None else None
        coordinator_metrics.register(metrics.registry, broker, lambda: election.is_active, offsets_log.appends
                                     if isinstance(offsets_log, replicated_offsets.ReplicatedOffsetsLog) else None)
        metrics.serve(settings.metrics_host, settings.metrics_port, settings.metrics_token_file)
        server = CoordinatorService(settings, broker, election, metrics)
        if loader is not None:
            server.group_owners = share_out(store, controller, loader, server.instance)
        broker.start_maintenance(settings.log_retention_check_interval_ms, lambda: election.is_active,
                                 settings.producer_id_expiration_ms)
        if isinstance(store, TransactionTimeouts):
            background.append(transaction_reaper(store, controller, settings, lambda: election.is_active))
        if isinstance(store, TopicOffsets):
            background.append(retain_offsets(store, settings, lambda: election.is_active))
        election.start(server.instance, controller)
        controller.start_timer()
        shutdown.serve_until_requested(
            f"coordinator {server.instance} serving {settings.data_dir} with store {settings.store_url} "
            f"({'TLS' if settings.tls_cert else 'plaintext'}, "
            f"{'token auth' if settings.tokens_file else 'NO authentication'})")
    except Interrupted as stop:
        log.info("%s before the instance was serving: stopping", stop)
    finally:
        _stop(shutdown, server, election, broker, background)
        collector.stop()


def transaction_reaper(store: TransactionTimeouts, controller: ControllerDriver, settings: Settings,
                       active: Callable[[], bool]) -> TransactionReaper:
    """Started: the abort of `store`'s transactions past their timeout, while `active()` (this instance is)."""
    store.max_transaction_timeout_ms = settings.transaction_max_timeout_ms
    interval_s = settings.transaction_cleanup_interval_ms / 1000
    leaders = LeaderCalls(controller, replicated_offsets.node_connection(settings.tls_cert is not None,
                                                                         server_token(settings.token_file)),
                          min(30.0, max(1.0, interval_s)))
    reaper = TransactionReaper(store, leaders, interval_s, active)
    store.writers_aborted = reaper.wake
    reaper.start()
    return reaper


def retain_offsets(store: TopicOffsets, settings: Settings, active: Callable[[], bool]) -> Periodic:
    """Started: the expiry of the groups served here (fabric.server.offsets_retention); over an offsets topic
    shared by every instance (a directory), only while `active()`; over its own partitions (the nodes'), always."""
    return offsets_retention.start(store, settings.offsets_retention_minutes,
                                   settings.offsets_retention_check_interval_ms,
                                   lambda: active() or not store.offsets_topic.log.shared)


def _stop(shutdown: Shutdown, server: CoordinatorService | None, election: Any, broker: ClusterBroker | None,
          background: list[TransactionReaper | Periodic]) -> None:
    """Stop serving (calls in flight finish), stop the background passes and the controller, leave the election
    and close the stores, within the deadline."""
    shutdown.begin()
    finished = True
    serving = shutdown.start("stop serving", server.shutdown) if server is not None else None
    for task in background:
        task.stop(shutdown.remaining() / 4 / len(background))
    if broker is not None:
        broker.stop_maintenance(shutdown.remaining() / 4)
        broker.controller.stop(shutdown.remaining() / 4)
    if election is not None:
        finished &= shutdown.wait("leave the election", shutdown.start(
            "leave the election", lambda: election.close(shutdown.remaining() / 2)), 0.5)
    if serving is not None:
        finished &= shutdown.wait("stop serving", serving)
    if broker is not None:
        broker.close()  # its SQLite connections belong to this thread
    shutdown.finish(finished)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m fabric.server.service [options]`: the same options as `fabric coordinator start`."""
    return server_main("python -m fabric.server.service", __doc__, add_start_arguments, settings_from, serve, argv)


if __name__ == "__main__":
    sys.exit(main())
