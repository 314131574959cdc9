"""`fabric transactions list|describe|abort`: kafka-transactions, for transactions on a cluster's data nodes (a
transactional producer's, a Spark sink batch's). Abort names a transactional id, not a partition: the coordinator
knows every writer of its open transaction and the partitions each one registered."""
from __future__ import annotations

import argparse
from datetime import datetime, timezone

from fabric.cli.common import CommandError, add_command, add_subcommands, format_table, open_fabric
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


def abort(args: argparse.Namespace) -> None:
    """Abort the id's open transaction's writers and wait for their markers."""
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


def _print_record(record: TransactionRecord) -> None:
    started = "-" if record.started_ms < 0 else \
        datetime.fromtimestamp(record.started_ms / 1000, timezone.utc).isoformat(timespec="milliseconds")
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
    p = add_command(verbs, "abort", abort, "abort the writers of a transactional id's open transaction",
                    description="Abort the writers of a transactional id's open transaction now, as its "
                                "transaction.timeout.ms would (abort markers on every partition they registered), "
                                "so read_committed readers move past it. The transaction itself stays undecided: a "
                                "Spark batch replayed still commits it; an aborted writer is fenced. Needs admin on "
                                "the transactional id.")
    p.add_argument("--transactional-id", required=True, metavar="ID")
    p.add_argument("--timeout-ms", type=int, default=60000, metavar="MS",
                   help="how long to wait for the markers (default 60000)")
