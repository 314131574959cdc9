"""The transaction requests a data node serves as a partition's leader (a mixin of ReplicaManager): the markers that
end a transactional id's writers as its coordinator decided (Kafka's WriteTxnMarkers), the open transactions an
operator lists (DescribeProducers, for find-hanging), and an operator's abort of one the coordinator does not know.
Markers are checked against the coordinator's record of the id before anything is written."""
from __future__ import annotations

import logging
from typing import Callable

from fabric.common.errors import InvalidRequestError, InvalidTxnStateError
from fabric.common.redaction import clip
from fabric.common.types import OpenTransaction, ProducerState, TransactionRecord
from fabric.coordinator.disk import disk_errors
from fabric.server import partition_ops
from fabric.server.node import open_transactions
from fabric.server.node.partition import PartitionReplica
from fabric.server.node.storage_health import StorageHealth
from fabric.server.node.transaction_verification import TransactionVerification
from fabric.storage.log_manager import LogManager

log = logging.getLogger(__name__)
MAX_MARKERS = 4096  # transaction markers one write_markers request writes at most


class TransactionMarkers:
    """A node's transaction requests, over the replicas ReplicaManager hosts (`replica`: the one it leads)."""

    logs: LogManager
    health: StorageHealth
    # the coordinator's record of a transactional id (set by the node), which markers are checked against
    transaction_record: Callable[[str], TransactionRecord] | None
    verification: TransactionVerification | None  # of transactional appends (set by the node)
    replica: Callable[..., PartitionReplica]

    def write_markers(self, topic: str, partition: int, transactional_id: str, commit: list[list[int]],
                      abort: list[list[int]], leader_epoch: int | None = None, timeout_ms: int = 30000,
                      topic_id: str = "") -> None:
        """End transactions of `transactional_id`'s writers as the leader: a commit marker for each [producer id,
        epoch] in `commit`, an abort marker for each in `abort` (Kafka's WriteTxnMarkers), answered once the
        in-sync replicas have them."""
        markers = [(*partition_ops.marker_producer(p), True) for p in commit] + \
                  [(*partition_ops.marker_producer(p), False) for p in abort]
        if not 1 <= len(markers) <= MAX_MARKERS:
            raise InvalidRequestError(f"write_markers takes 1 to {MAX_MARKERS} markers, got {len(markers)}")
        if not isinstance(transactional_id, str) or not transactional_id:
            raise InvalidRequestError(f"transactional_id must be a non-empty string, got {clip(transactional_id)}")
        timeout_s = partition_ops.wait_seconds("timeout_ms", timeout_ms)
        replica = self.replica(topic, partition, leader_epoch, topic_id=topic_id)
        self._check_decided(topic, partition, transactional_id, markers)
        if self.verification is not None:
            self.verification.markers_begin((topic, partition))
        with self.health.writing((topic, partition), f"write transaction markers to {topic}-{partition}"):
            replica.write_markers(markers, leader_epoch, timeout_s)

    def _check_decided(self, topic: str, partition: int, transactional_id: str,
                       markers: list[tuple[int, int, bool]]) -> None:
        """InvalidTxnStateError (nothing written) unless the coordinator's record of `transactional_id` decided
        every one of these markers for this partition: a client may end only its own id's writers, as decided."""
        if self.transaction_record is None:
            return
        commit, abort = self.transaction_record(transactional_id).markers().get((topic, partition), ([], []))
        decided = {(p, e, True) for p, e in commit} | {(p, e, False) for p, e in abort}
        stray = sorted(set(markers) - decided)
        if stray:
            raise InvalidTxnStateError(
                f"markers {[(p, e, 'commit' if c else 'abort') for p, e, c in stray][:5]} for {topic}-{partition} "
                f"are not what the coordinator decided for transactional id {clip(transactional_id)} (commit "
                f"{commit[:5]}, abort {abort[:5]}); nothing was written")

    def describe_producers(self, topic: str, partition: int, leader_epoch: int | None = None,
                           topic_id: str = "") -> list[ProducerState]:
        """The partition's producers and their open transactions, at its leader (Kafka's DescribeProducers, for
        describe-producers and find-hanging)."""
        replica = self.replica(topic, partition, leader_epoch, topic_id=topic_id)
        with disk_errors(self.logs.topic_dir(topic), f"read partition {topic}-{partition}"):
            return open_transactions.producers(replica.log)

    def abort_open_transaction(self, topic: str, partition: int, start_offset: int, leader_epoch: int | None = None,
                               timeout_ms: int = 30000, topic_id: str = "") -> OpenTransaction:
        """An operator's abort of the transaction open on the partition from `start_offset` (kafka-transactions
        abort --start-offset: one the coordinator does not know, which holds the last stable offset back for
        good): its abort marker, with its epoch + 1 (fencing its producer), answered once the in-sync replicas
        have it; the transaction it ended."""
        timeout_s = partition_ops.wait_seconds("timeout_ms", timeout_ms)
        replica = self.replica(topic, partition, leader_epoch, topic_id=topic_id)
        with disk_errors(self.logs.topic_dir(topic), f"abort a transaction of {topic}-{partition}"):
            found = open_transactions.starting_at(replica.log, start_offset)
            if self.verification is not None:
                self.verification.markers_begin((topic, partition))
            replica.write_markers([(found.producer_id, max(found.producer_epoch, 0) + 1, False)], leader_epoch,
                                  timeout_s)
        log.warning("partition %s-%d: the open transaction of producer %d from offset %d was aborted by an operator",
                    topic, partition, found.producer_id, start_offset)
        return found
