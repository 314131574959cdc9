"""`fabric transactions list|describe|describe-producers|abort|find-hanging`: kafka-transactions, for transactions
on a cluster's data nodes (a transactional producer's, a Spark sink batch's). Abort names a transactional id (the
coordinator knows every writer of its open transaction and the partitions each one registered), or, for a hanging
transaction the coordinator does not know, the partition and offset where it starts (as find-hanging lists them)."""
from __future__ import annotations

import argparse

from fabric.cli.common import CommandError, add_command, add_subcommands, format_table, open_fabric, utc_text
from fabric.common.types import TransactionRecord


def list_transactions(args: argparse.Namespace) -> None:
    """One row per transactional id: its latest transaction's state and writers, as kafka-transactions list."""
    with open_fabric(args) as fab:
        records = fab.list_transactions()
    print(format_table(("TRANSACTIONAL-ID", "STATE", "SEQUENCE", "WRITERS"),
                       [(r.transactional_id, r.state, r.sequence if r.sequence >= 0 else r.committed_sequence,
                         len(r.writers) + len(r.aborted)) for r in records]))


def describe(args: argparse.Namespace) -> None:
    """The id's latest transaction (state, start, timeout), then one row per writer and partition."""
    with open_fabric(args) as fab:
        _print_record(fab.describe_transaction(args.transactional_id))


def describe_producers(args: argparse.Namespace) -> None:
    """One row per producer of the partition, at its leader, as kafka-transactions describe-producers."""
    with open_fabric(args) as fab:
        producers = fab.describe_producers(args.topic, args.partition)
    print(format_table(("PRODUCER-ID", "PRODUCER-EPOCH", "LAST-SEQUENCE", "LAST-TIMESTAMP",
                        "CURRENT-TRANSACTION-START-OFFSET"),
                       [(p.producer_id, p.producer_epoch, p.last_sequence, _when(p.last_timestamp_us // 1000),
                         p.transaction_start_offset) for p in producers]))


def abort(args: argparse.Namespace) -> None:
    """Abort the id's open transaction's writers and wait for their markers; or the hanging transaction that
    starts at --start-offset of --topic's --partition."""
    by_offset = [v is not None for v in (args.topic, args.partition, args.start_offset)]
    if not (all(by_offset) if args.transactional_id is None else not any(by_offset)):
        raise CommandError("abort takes --transactional-id ID, or --topic T --partition P --start-offset O (a hanging "
                           "transaction, as find-hanging lists it)")
    if args.transactional_id is None:
        with open_fabric(args) as fab:
            found = fab.abort_hanging_transaction(args.topic, args.partition, args.start_offset)
        print(f"Aborted the transaction of producer {found.producer_id} (epoch {found.producer_epoch}) open on "
              f"{found.topic}-{found.partition} from offset {found.start_offset}.")
        return
    if args.timeout_ms < 1:
        raise CommandError(f"--timeout-ms must be at least 1, got {args.timeout_ms}")
    with open_fabric(args) as fab:
        before = fab.describe_transaction(args.transactional_id)
        if not before.open:
            print(f"Transactional id {before.transactional_id!r} has no open transaction (state {before.state}): "
                  "nothing to abort.")
            return
        print(f"Aborting {len(before.writers)} writer(s) of transaction {before.transactional_id}:{before.sequence} "
              f"and waiting for their markers (up to {args.timeout_ms} ms)...")
        _print_record(fab.abort_transaction(args.transactional_id, args.timeout_ms / 1000))


def find_hanging(args: argparse.Namespace) -> None:
    """One row per hanging transaction: where it starts, its producer, how long it has been open and what the
    coordinator knows of it (kafka-transactions find-hanging)."""
    if args.node_id is not None and args.topic is not None:
        raise CommandError("find-hanging takes --node-id or --topic (with --partition), not both")
    if args.partition is not None and args.topic is None:
        raise CommandError("--partition needs --topic")
    if args.max_transaction_timeout < 0:
        raise CommandError(f"--max-transaction-timeout must be minutes from 0, got {args.max_transaction_timeout}")
    with open_fabric(args) as fab:
        found = fab.find_hanging_transactions(args.node_id, args.topic, args.partition,
                                              args.max_transaction_timeout * 60_000)
    print(format_table(("TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "START-OFFSET", "OPEN-MINUTES",
                        "COORDINATOR"),
                       [(h.topic, h.partition, h.producer_id, h.producer_epoch, h.start_offset,
                         "-" if h.open_ms < 0 else h.open_ms // 60_000,
                         h.coordinator if h.transactional_id is None else f"{h.coordinator} ({h.transactional_id})")
                        for h in found]))


def _when(ms: int) -> str:
    """A time in ms since the epoch as ISO 8601 in UTC, "-" for none (below 0)."""
    return utc_text(ms * 1000, "milliseconds") or "-"


def _print_record(record: TransactionRecord) -> None:
    started = _when(record.started_ms)
    print(f"TransactionalId: {record.transactional_id}\tState: {record.state}\tSequence: {record.sequence}\t"
          f"CommittedSequence: {record.committed_sequence}\tStarted: {started}\t"
          f"TimeoutMs: {record.timeout_ms or '-'}")
    committed = set(record.committed_writers or ())
    rows = [(w.producer_id, w.producer_epoch, "committed" if w.producer_id in committed else
             ("open" if record.open else "aborted"), f"{t}-{p}")
            for w in record.writers for t, p in w.partitions]
    rows += [(w.producer_id, w.producer_epoch, "aborting", f"{t}-{p}") for w in record.aborted for t, p in w.partitions]
    print(format_table(("PRODUCER-ID", "PRODUCER-EPOCH", "WRITER", "PARTITION"), rows))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `fabric transactions ...`."""
    group = add_command(subparsers, "transactions", None, "list, describe and abort transactions on data nodes")
    verbs = add_subcommands(group, "transaction commands")
    add_command(verbs, "list", list_transactions, "every transactional id with its latest transaction's state")
    p = add_command(verbs, "describe", describe, "a transactional id's latest transaction and its writers")
    p.add_argument("--transactional-id", required=True, metavar="ID")
    p = add_command(verbs, "describe-producers", describe_producers, "a partition's producers: epoch, last "
                    "sequence and timestamp, open transaction",
                    description="List the idempotent and transactional producers of a replicated partition, at its "
                                "leader (kafka-transactions describe-producers): each one's epoch, last sequence and "
                                "last timestamp, and the offset its open transaction starts at (-1: none). Needs "
                                "read on the topic.")
    p.add_argument("--topic", required=True, metavar="T")
    p.add_argument("--partition", required=True, type=int, metavar="P")
    p = add_command(verbs, "abort", abort, "abort the writers of a transactional id's open transaction, or a "
                    "hanging transaction by where it starts",
                    description="Abort the writers of a transactional id's open transaction now, as its "
                                "transaction.timeout.ms would (abort markers on every partition they registered), "
                                "so read_committed readers move past it. The transaction itself stays undecided: a "
                                "Spark batch replayed still commits it; an aborted writer is fenced. Needs admin on "
                                "the transactional id. With --topic, --partition and --start-offset instead: abort "
                                "the hanging transaction that starts there (one find-hanging lists), with an abort "
                                "marker at the partition's leader; needs cluster_action on the cluster.")
    p.add_argument("--transactional-id", metavar="ID")
    p.add_argument("--timeout-ms", type=int, default=60000, metavar="MS",
                   help="how long to wait for the markers (default 60000)")
    p.add_argument("--topic", metavar="T", help="with --partition and --start-offset: a hanging transaction's")
    p.add_argument("--partition", type=int, metavar="P")
    p.add_argument("--start-offset", type=int, metavar="O", help="where the hanging transaction starts")
    p = add_command(verbs, "find-hanging", find_hanging, "transactions open on partitions that nothing will end",
                    description="List the transactions open on partitions (of the partitions node --node-id leads, "
                                "of --topic, or of every replicated topic) that the coordinator does not know, or "
                                "decided more than --max-transaction-timeout ago without their marker reaching the "
                                "partition: they hold read_committed readers back for good. Abort one with `abort "
                                "--topic T --partition P --start-offset O`. Needs read on the topics and describe on "
                                "every transactional id (transactional-id:*).")
    p.add_argument("--node-id", "--broker-id", type=int, metavar="N",
                   help="the partitions this node leads (--broker-id: Kafka's name)")
    p.add_argument("--topic", metavar="T")
    p.add_argument("--partition", type=int, metavar="P", help="with --topic: this partition only")
    p.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                   help="the coordinator's transaction.max.timeout.ms in minutes (default 15): a decided "
                        "transaction open longer is listed")
