"""The coordinator service: a Broker (data and metadata) served over Arrow Flight.

DoAction runs the coordinator and admin calls of ROUTES (JSON bodies, see coordinator/wire.py); DoPut appends
or publishes stored rows; DoGet fetches. Every call is authenticated (coordinator/security.py) and authorized
per route. Only the active instance (per the election; a sqlite-store instance is always active) serves
writes and group calls; a standby answers "not the active coordinator, active is HOST:PORT". Reads, append
and fetch are served by any instance (the data directory is shared and its storage multi-process safe).

Run: `fabric coordinator start ...` or `python -m fabric.server.service --listen 127.0.0.1:9093 --data DIR ...`.
"""
from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.flight as flight

from fabric.common import logs
from fabric.common.errors import FabricError, InvalidRequestError, SchemaMismatchError
from fabric.common.records import storage_schema
from fabric.common.redaction import clip
from fabric.common.types import transaction_sequence
from fabric.coordinator.election import NotControllerError
from fabric.coordinator.interface import Coordinator
from fabric.server import security, wire
from fabric.server.arguments import check_call
from fabric.server.broker import Broker
from fabric.server.instance import (
    SERVER_LOG_LEVEL,
    Settings,
    add_start_arguments,
    check_listen,
    open_store,
    settings_from,
)
from fabric.server.shutdown import Interrupted, Shutdown, exit_now

log = logging.getLogger(__name__)
Checks = Callable[[dict[str, Any]], list[tuple[str, str]]]


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


def on_transactional_id(operation: str) -> Checks:
    """The ACL check `operation` on transactional-id:<the id of args["txn"], `<transactional id>:<sequence>`>."""
    return lambda args: [(operation, transactional_id(args["txn"]))]


def transactional_id(txn: str) -> str:
    """The ACL resource of a transaction id (as Kafka binds a transactional producer's id to an ACL)."""
    return f"transactional-id:{transaction_sequence(txn)[0]}"


def recover_checks(args: dict[str, Any]) -> list[tuple[str, str]]:
    """Recovering topics needs `create` on each (on topic:* to recover every directory)."""
    names = args.get("names")
    return [("create", "topic:*")] if names is None else [("create", f"topic:{n}") for n in names]


@dataclass(frozen=True)
class Route:
    """One DoAction: the method it calls on the broker or its coordinator, its ACL checks, whether only the
    active instance may serve it, and (for listings) the (operation, resource kind) that filters the result."""

    target: str
    checks: Checks
    active_only: bool = False
    filter_by: tuple[str, str] | None = None


ROUTES: dict[str, Route] = {
    "create_topic": Route("broker", on_topic("create"), True),
    "delete_topic": Route("broker", on_topic("admin"), True),
    "create_partitions": Route("broker", on_topic("admin"), True),
    "recover_topics": Route("broker", recover_checks, True),
    "topic": Route("coordinator", on_topic("describe")),
    "list_topics": Route("coordinator", nothing, filter_by=("describe", "topic")),
    "alter_topic_config": Route("coordinator", on_topic("admin"), True),
    "set_partitions": Route("broker", on_topic("admin"), True),
    "commit_offsets": Route("broker", commit_checks, True),
    "committed": Route("coordinator", on_group("describe")),
    "list_groups": Route("coordinator", nothing, filter_by=("describe", "group")),
    "delete_group": Route("coordinator", on_group("admin"), True),
    "commit_transaction": Route("coordinator", on_transactional_id("write"), True),
    "transaction_committed": Route("coordinator", on_transactional_id("describe")),
    "join_group": Route("coordinator", lambda a: [("group", f"group:{a['request'].group}")], True),
    "sync_group": Route("coordinator", on_group("group"), True),
    "heartbeat": Route("coordinator", on_group("group"), True),
    "leave_group": Route("coordinator", on_group("group"), True),
    "describe_group": Route("coordinator", on_group("describe"), True),
    "partition_state": Route("broker", on_topic("describe", "topic")),
    "offset_for_time": Route("broker", on_topic("describe", "topic")),
    "enforce_retention": Route("broker", on_topic("admin", "topic"), True),
    "status": Route("service", nothing),
}


def translated(handler: Callable) -> Callable:
    """Send any exception a handler raises as the Flight error that carries its type and message; a write
    the store refused because this instance is no longer the controller becomes a "not active" answer."""
    @functools.wraps(handler)
    def run(self: CoordinatorService, *args: Any, **kwargs: Any) -> Any:
        try:
            return handler(self, *args, **kwargs)
        except Exception as exc:
            if isinstance(exc, NotControllerError):
                raise wire.not_active(self.instance, self.election.active_instance()) from exc
            if isinstance(exc, FabricError):
                log.debug("%s refused: %s", handler.__name__, exc)
            else:  # a bug or an environment failure: the client gets its type and message, the log the trace
                log.exception("%s failed", handler.__name__)
            raise wire.to_flight_error(exc) from exc
    return run


class CoordinatorService(flight.FlightServerBase):
    """One coordinator instance: serves `broker` (data in a shared directory, metadata in the store)."""

    def __init__(self, settings: Settings, broker: Broker, election: Any) -> None:
        self.settings, self.broker, self.election = settings, broker, election
        tokens = security.load_tokens(settings.tokens_file) if settings.tokens_file else None
        self.authorizer = security.Authorizer(security.load_acls(settings.acl_file) if settings.acl_file else None)
        cert = security.read_pem(settings.tls_cert, "TLS certificate")
        key = security.read_pem(settings.tls_key, "TLS private key")
        if (cert is None) != (key is None):
            raise FabricError("TLS needs both --tls-cert and --tls-key (PEM files)")
        scheme = "grpc+tls" if cert else "grpc+tcp"
        check_listen(settings.listen)
        try:
            super().__init__(f"{scheme}://{settings.listen}", tls_certificates=[(cert, key)] if cert else None,
                             middleware={security.MIDDLEWARE_KEY: security.TokenAuthFactory(tokens)})
        except pa.ArrowException as exc:
            raise FabricError(f"cannot listen on {settings.listen}: the server did not start ({exc}); check that "
                              "the address belongs to this machine and the port is free") from None

    @property
    def instance(self) -> str:
        """This instance's advertised host:port."""
        return self.settings.advertise_address(self.port)

    # -- checks ------------------------------------------------------------------------------------
    def _authorize(self, context: flight.ServerCallContext, checks: list[tuple[str, str]]) -> str:
        principal = context.get_middleware(security.MIDDLEWARE_KEY).name
        self.authorizer.check(principal, checks)
        return principal

    def _require_active(self) -> None:
        if not self.election.is_active:
            raise wire.not_active(self.instance, self.election.active_instance() or "")

    # -- actions -----------------------------------------------------------------------------------
    @translated
    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> list[bytes]:
        route = ROUTES.get(action.type)
        if route is None:
            raise InvalidRequestError(f"unknown coordinator action {clip(action.type, 60)}; known: "
                                      f"{', '.join(sorted(ROUTES))}")
        args = wire.action_args(action.body)
        check_call(action.type, getattr(INTERFACES[route.target], action.type), args)
        principal = self._authorize(context, route.checks(args))
        if route.active_only:
            self._require_active()
        target = {"broker": self.broker, "coordinator": self.broker.coordinator, "service": self}[route.target]
        result = getattr(target, action.type)(**args)
        if route.filter_by is not None:
            operation, kind = route.filter_by
            result = [name for name in result if self.authorizer.allowed(principal, operation, f"{kind}:{name}")]
        return [wire.dumps(result)]

    def list_actions(self, context: flight.ServerCallContext) -> list[tuple[str, str]]:
        return [(name, f"{route.target}.{name}") for name, route in sorted(ROUTES.items())]

    def status(self) -> wire.InstanceStatus:
        """Which instance this is, whether it is active, and which one is."""
        election, settings = self.election, self.settings
        return wire.InstanceStatus(self.instance, election.is_active, election.active_instance() or "",
                                   election.epoch, settings.store_url, os.path.abspath(settings.data_dir),
                                   settings.tls_cert is not None)

    # -- data plane --------------------------------------------------------------------------------
    @translated
    def do_put(self, context: flight.ServerCallContext, descriptor: flight.FlightDescriptor,
               reader: flight.MetadataRecordBatchReader, writer: flight.FlightMetadataWriter) -> None:
        request = wire.request_args(descriptor.command, "DoPut descriptor")
        op = request.pop("op", None)
        if op == "append":
            check_call(op, Broker.append, request, skip=("rows",))
            self._authorize(context, [("write", f"topic:{request['topic']}")])
            rows = self._stored_rows(request["topic"], reader)
            result = self.broker.append(rows=rows, **request)  # checked against its signature, defaults kept
        elif op in wire.PUBLISH_OPS:
            method, _, items = wire.PUBLISH_OPS[op]
            keys = wire.publish_keys(request.pop("keys", None))
            check_call(op, getattr(Broker, method), request, skip=("parts",))
            self._authorize(context, [("write", transactional_id(request["txn"]))]
                            + [("write", f"topic:{t}") for t in sorted({t for t, _ in keys})])
            self._require_active()
            parts = wire.unwrap(keys, reader, items)
            result = getattr(self.broker, method)(request.pop("txn"), parts, **request)
        else:
            raise InvalidRequestError(f"unknown coordinator put {clip(op, 60)}; expected append, publish or "
                                      "publish_frames")
        writer.write(pa.py_buffer(wire.dumps(result)))

    def _stored_rows(self, topic: str, reader: flight.MetadataRecordBatchReader) -> pa.RecordBatch:
        """An append's rows as one batch; SchemaMismatchError unless they have the topic's storage schema."""
        expected = storage_schema(self.broker.coordinator.topic(topic).value_schema)
        if not reader.schema.equals(expected):
            raise SchemaMismatchError(
                f"an append to topic {topic!r} must carry stored rows with schema "
                f"({wire.schema_text(expected)}), got ({wire.schema_text(reader.schema)}); produce with a fabric "
                "producer (fabric.records.to_storage)")
        return _one_batch(reader.read_all())

    @translated
    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.GeneratorStream:
        args = wire.request_args(ticket.ticket, "DoGet ticket")
        check_call("fetch", Broker.fetch, args)
        self._authorize(context, [("read", f"topic:{args['topic']}")])
        fetched = self.broker.fetch(**args)
        schema = None if fetched else storage_schema(self.broker.coordinator.topic(args["topic"]).value_schema)
        return wire.fetch_stream(schema, fetched)


# Where each route's method is declared: requests are checked against these signatures (coordinator/arguments.py).
INTERFACES: dict[str, type] = {"broker": Broker, "coordinator": Coordinator, "service": CoordinatorService}


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    """A DoPut's rows as the single batch Broker.append takes."""
    batches = table.combine_chunks().to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)


def serve(settings: Settings) -> None:
    """Run one instance until SIGTERM/SIGINT: open the store and the data, join the election, serve; then stop
    within settings.shutdown_timeout_ms (fabric.server.shutdown), even if ZooKeeper or the peers are gone."""
    shutdown = Shutdown(settings.shutdown_timeout_ms / 1000)
    shutdown.install()
    election: Any = None
    broker = server = None
    try:
        store, election = open_store(settings)
        broker = Broker(settings.data_dir, store, settings.max_partitions)
        server = CoordinatorService(settings, broker, election)
        election.start(server.instance)
        print(f"coordinator {server.instance} serving {settings.data_dir} with store {settings.store_url} "
              f"({'TLS' if settings.tls_cert else 'plaintext'}, "
              f"{'token auth' if settings.tokens_file else 'NO authentication'})", flush=True)
        shutdown.serving = True
        while not shutdown.requested.wait(1.0):
            pass
    except Interrupted as stop:
        log.info("%s before the instance was serving: stopping", stop)
    finally:
        _stop(shutdown, server, election, broker)


def _stop(shutdown: Shutdown, server: CoordinatorService | None, election: Any, broker: Broker | None) -> None:
    """Stop serving (calls in flight finish), leave the election and close the stores, within the deadline."""
    shutdown.begin()
    finished = True
    serving = shutdown.start("stop serving", server.shutdown) if server is not None else None
    if election is not None:
        finished &= shutdown.wait("leave the election", shutdown.start(
            "leave the election", lambda: election.close(shutdown.remaining() / 2)), 0.5)
    if serving is not None:
        finished &= shutdown.wait("stop serving", serving)
    if broker is not None:
        broker.close()  # its SQLite connections belong to this thread
    if not finished:
        exit_now("stopped with steps unfinished (see above): exiting now", 1)
    log.info("stopped")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m fabric.server.service [options]`: the same options as `fabric coordinator start`."""
    parser = argparse.ArgumentParser(prog="python -m fabric.server.service", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_start_arguments(parser)
    args = parser.parse_args(argv)
    logs.configure(logs.level_of(args, SERVER_LOG_LEVEL))
    try:
        serve(settings_from(args))
    except FabricError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
