"""The state machine of a transactional id's one record (TransactionRecord), which both stores run inside
their own atomic read-modify-write (SQLite: one BEGIN IMMEDIATE transaction; ZooKeeper: compare-and-set on the
znode version), and its JSON form.

States of transaction `sequence` S of an id:
- Ongoing(S): writers join (`add_writer`) before they write anything, each with the partitions it will write
  (none for a producer transaction that only commits a group's offsets, so its twin still learns it lost);
  a writer of a newer S' starts Ongoing(S'). If S committed, its writers are forgotten (S' > S is only started
  once S's markers were written: the Spark sink commits its batches in order); if S is still undecided, it can
  never commit any more, so its writers move to the aborted writers, whose abort markers the coordinator writes
  (a writer the record forgot would hold its partitions' last stable offset back for good).
- Committed(S): `commit` with the producer ids of the writers whose output counts (the tasks that succeeded)
  is the commit point: those writers' transactions are committed on every partition they registered, every
  other writer of S aborted (TransactionRecord.markers), even when the markers are only written later.
- Markers owed: a decided S (committed, or decided with no writers: aborted) keeps its writers' `started_ms`
  until the coordinator knows their markers are written. Its writer writes them right after the commit point; one
  that died there would leave its open transactions pinning the last stable offset of its partitions for good, so
  once S's transaction.timeout.ms has passed since its first join the coordinator writes S's markers itself
  (`owes_markers`; writing one twice is harmless), as Kafka's coordinator ends every decided transaction, and
  `decided_markers_written` drops `started_ms`.
- Timed out: Ongoing(S) past its transaction.timeout.ms (counted from its first writer's join) has its writers
  aborted by the coordinator (`expire`): they move to the record's `aborted` writers, whose abort markers the
  coordinator writes (`markers_written` then forgets them), and S stays Ongoing with no writers, so a replay of S
  by new writers still commits it. A commit or a join naming an aborted writer is refused.

Refused with InvalidTxnStateError: a writer joining S once S committed, or once a newer transaction began (a
zombie: it must not write), and a commit naming a writer that never joined (its frames could not be found to
end). Committing S again is a no-op, so a replayed batch changes nothing. The publish path (embedded fabric)
commits without writers: only its sequence is recorded.

A producer transaction on a cluster with data nodes may commit a group's offsets (Kafka's TxnOffsetCommit): they
are stored in the record by the commit itself, so they are decided with it, and cleared (`applied`) once the
coordinator wrote them to the offsets topic (coordinator.transaction_offsets). While a record holds such pending
offsets, no other transaction of the id commits (CoordinatorUnavailableError, retriable): they are applied first,
so a group's offsets are applied in commit order.
"""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Sequence

from fabric.common import checks
from fabric.common.config import LONG_MAX
from fabric.common.errors import CoordinatorUnavailableError, InvalidRequestError, InvalidTxnStateError
from fabric.common.redaction import clip
from fabric.common.types import TopicPartition, TransactionalOffsets, TransactionRecord, TransactionWriter

MAX_WRITERS = 4096  # writers of one transaction (Spark tasks and their retries)
MAX_PARTITIONS = 20_000  # (writer, partition) pairs of one transaction: keeps a record well below 1 MiB


def writer(producer_id: Any, producer_epoch: Any, partitions: Any) -> TransactionWriter:
    """A writer as a request gives it, checked: ids in the frame header's ranges, [topic, partition] pairs."""
    for name, value, hi in (("producer_id", producer_id, LONG_MAX), ("producer_epoch", producer_epoch, 32766)):
        if not checks.is_integer(value) or not 0 <= value <= hi:
            raise InvalidRequestError(f"{name} must be an int from 0 to {hi}, got {clip(value)}; a writer gets its "
                                      "id and epoch from init_producer_id")
    if not isinstance(partitions, (list, tuple)) or len(partitions) > MAX_PARTITIONS:
        raise InvalidRequestError(f"a writer names up to {MAX_PARTITIONS} [topic, partition] pairs (none: it commits "
                                  f"only a group's offsets), got {clip(partitions)}")
    keys = sorted({checks.topic_partition(tp, "a transaction writer's partitions") for tp in partitions})
    return TransactionWriter(int(producer_id), int(producer_epoch), tuple(keys))


def add_writer(record: TransactionRecord, sequence: int, new: TransactionWriter, now_ms: int, timeout_ms: int
               ) -> TransactionRecord:
    """The record once `new` joined transaction `sequence` at `now_ms` asking for `timeout_ms` (see the module
    docstring for refusals)."""
    txn = f"{record.transactional_id}:{sequence}"
    if any(w.producer_id == new.producer_id for w in record.aborted):
        raise InvalidTxnStateError(f"writer {new.producer_id} of transaction {txn} was aborted by the coordinator "
                                   "once its transaction.timeout.ms passed: it must not write; start the work "
                                   "again with a new producer id (init_producer_id)")
    if record.committed_sequence >= sequence:
        raise InvalidTxnStateError(f"transaction {txn} committed already (the latest committed is "
                                   f"{record.committed_sequence}): writer {new.producer_id} must not write to it")
    if record.sequence > sequence:
        raise InvalidTxnStateError(f"transaction {record.transactional_id}:{record.sequence} began after {txn}: "
                                   f"writer {new.producer_id} of the older one must not write")
    same = record.sequence == sequence and bool(record.writers)
    writers = list(record.writers) if record.sequence == sequence else []
    old = next((w for w in writers if w.producer_id == new.producer_id), None)
    if old is not None:
        writers.remove(old)
        new = TransactionWriter(new.producer_id, new.producer_epoch,
                                tuple(sorted(set(old.partitions) | set(new.partitions))))
    writers.append(new)
    abandoned = record.writers if record.sequence < sequence and record.committed_sequence < record.sequence else ()
    if len(writers) > MAX_WRITERS or sum(len(w.partitions) for w in writers) > MAX_PARTITIONS:
        raise InvalidRequestError(f"transaction {txn} would have more than {MAX_WRITERS} writers or "
                                  f"{MAX_PARTITIONS} (writer, partition) pairs; write fewer partitions per batch")
    return TransactionRecord(record.transactional_id, record.committed_sequence, sequence, tuple(writers), None,
                             record.offsets, record.started_ms if same else now_ms,
                             max(timeout_ms, record.timeout_ms) if same else timeout_ms,
                             record.aborted + abandoned)


def registered(record: TransactionRecord, producer_id: int, producer_epoch: int, tp: TopicPartition) -> bool:
    """True if the record's open transaction has producer `producer_id` at `producer_epoch` as a writer that joined
    with partition `tp` (what a leader verifies before a transactional batch opens a transaction there)."""
    return record.open and any(w.producer_id == producer_id and w.producer_epoch == producer_epoch
                               and tp in w.partitions for w in record.writers)


def commit(record: TransactionRecord, sequence: int, committed: Sequence[int] | None,
           offsets: TransactionalOffsets | None = None) -> TransactionRecord | None:
    """The record once transaction `sequence` committed with the writers `committed` (None: a publish, which
    has none) and, pending until applied, the group `offsets` it commits; None if it needs no change (committed
    already)."""
    if record.committed_sequence >= sequence:
        return None
    if record.offsets is not None:
        raise CoordinatorUnavailableError(
            f"the group offsets of transaction {record.transactional_id}:{record.committed_sequence} are still being "
            f"applied; transaction {record.transactional_id}:{sequence} commits once they are: retry")
    if committed is None:
        return replace(record, committed_sequence=sequence, offsets=offsets)
    if not isinstance(committed, (list, tuple)) or len(committed) > MAX_WRITERS \
            or not all(checks.is_integer(p) for p in committed):
        raise InvalidRequestError(f"committed writers must be a list of at most {MAX_WRITERS} producer ids, got "
                                  f"{clip(committed)}")
    expired = sorted(set(committed) & {w.producer_id for w in record.aborted})
    if expired:
        raise InvalidTxnStateError(f"transaction {record.transactional_id}:{sequence} cannot commit writers "
                                   f"{expired[:10]}: the coordinator aborted them once the transaction's "
                                   f"transaction.timeout.ms ({record.timeout_ms} ms) passed; run it again")
    joined = {w.producer_id for w in record.writers} if record.sequence == sequence else set()
    unknown = sorted(set(committed) - joined)
    if unknown:
        raise InvalidTxnStateError(f"transaction {record.transactional_id}:{sequence} cannot commit writers "
                                   f"{unknown[:10]}: they never joined it, or the coordinator aborted them once its "
                                   f"transaction.timeout.ms passed (its writers: {sorted(joined)[:10]})")
    writers = record.writers if record.sequence == sequence else ()
    return replace(record, committed_sequence=sequence, sequence=sequence, writers=writers,
                   committed_writers=tuple(sorted(set(committed))), offsets=offsets)


def expire(record: TransactionRecord, now_ms: int) -> TransactionRecord | None:
    """The record once the coordinator aborted the writers of its open transaction, whose timeout_ms passed
    since started_ms: they move to `aborted` (their abort markers to write; a commit or a join naming them is
    refused), and the transaction stays undecided, so new writers may still run it (a Spark batch replayed) and
    commit it. None if it is not open or not past its timeout."""
    if not record.open or record.started_ms < 0 or now_ms < record.started_ms + record.timeout_ms:
        return None  # (a record written before transactions had timeouts has no started_ms: never expired)
    return abort_writers(record)


def owes_markers(record: TransactionRecord, now_ms: int) -> bool:
    """Whether the coordinator writes the markers of the record's decided transaction itself at `now_ms`: it has
    writers, was decided, and its transaction.timeout.ms has passed since its first writer joined with no word
    that its markers are written (module docstring, "Markers owed")."""
    return (bool(record.writers) and record.committed_sequence == record.sequence and record.started_ms >= 0
            and now_ms >= record.started_ms + record.timeout_ms)


def decided_markers_written(record: TransactionRecord, sequence: int) -> TransactionRecord | None:
    """The record once the markers of its decided transaction `sequence` are on every partition its writers
    registered; None if it has moved on (a newer transaction joined) or owes none."""
    if record.committed_sequence != sequence or record.sequence != sequence or record.started_ms < 0:
        return None
    return replace(record, started_ms=-1, timeout_ms=0)


def abort_writers(record: TransactionRecord) -> TransactionRecord | None:
    """The record once the writers of its open transaction were aborted, as `expire` does, whatever their timeout
    (an operator's `fabric transactions abort`); None if it is not open."""
    if not record.open:
        return None
    return replace(record, writers=(), started_ms=-1, timeout_ms=0, aborted=record.aborted + record.writers)


def markers_written(record: TransactionRecord, written: Sequence[TransactionWriter]) -> TransactionRecord | None:
    """The record once the abort markers of the aborted writers `written` are on every partition they
    registered; None if it holds none of them."""
    left = tuple(w for w in record.aborted if w not in written)
    return None if len(left) == len(record.aborted) else replace(record, aborted=left)


def applied(record: TransactionRecord, sequence: int) -> TransactionRecord | None:
    """The record once the pending offsets of transaction `sequence` were written to the offsets topic; None if
    it holds none of that transaction (another applier cleared them)."""
    if record.offsets is None or record.committed_sequence != sequence:
        return None
    return replace(record, offsets=None)


def to_json(record: TransactionRecord) -> str:
    """The writers and pending offsets part of a stored record (the committed sequence has its own column or
    field)."""
    data: dict[str, Any] = {"sequence": record.sequence, "committed": record.committed_writers,
                            "writers": _writers_json(record.writers)}
    if record.writers and record.started_ms >= 0:  # open, or decided with its markers owed
        data["started_ms"], data["timeout_ms"] = record.started_ms, record.timeout_ms
    if record.aborted:
        data["aborted"] = _writers_json(record.aborted)
    pending = record.offsets
    if pending is not None:
        notes = pending.metadata
        data["offsets"] = [pending.group, [[t, p, o] for (t, p), o in sorted(pending.offsets.items())],
                           notes if isinstance(notes, str) else [[t, p, m] for (t, p), m in sorted(notes.items())],
                           pending.generation, pending.member_id]
    return json.dumps(data, separators=(",", ":"))


def from_json(transactional_id: str, committed_sequence: int, text: str) -> TransactionRecord:
    """A stored record from its committed sequence and to_json's text ('' for a record written before
    transactions had writers)."""
    if not text:
        return TransactionRecord(transactional_id, committed_sequence)
    data = json.loads(text)
    committed, pending = data["committed"], data.get("offsets")
    offsets = None if pending is None else TransactionalOffsets(
        pending[0], {(t, p): o for t, p, o in pending[1]},
        pending[2] if isinstance(pending[2], str) else {(t, p): m for t, p, m in pending[2]}, pending[3], pending[4])
    return TransactionRecord(
        transactional_id, committed_sequence, data["sequence"], _writers(data["writers"]),
        None if committed is None else tuple(committed), offsets, data.get("started_ms", -1),
        data.get("timeout_ms", 0), _writers(data.get("aborted", [])))


def _writers_json(writers: Sequence[TransactionWriter]) -> list[Any]:
    return [[w.producer_id, w.producer_epoch, [list(tp) for tp in w.partitions]] for w in writers]


def _writers(data: list[Any]) -> tuple[TransactionWriter, ...]:
    return tuple(TransactionWriter(p, e, tuple((t, n) for t, n in parts)) for p, e, parts in data)
