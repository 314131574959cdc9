"""Transactional appends verified at the leader (fabric/server/node/transaction_verification.py, KIP-890): a batch
opens its producer's transaction on a partition only once the coordinator's record registers the producer, its
epoch and the partition in an open transaction; later batches of the open transaction cost no round trip; a
fenced producer hears of its epoch first; a marker racing a verification makes it verify again."""
from __future__ import annotations

import pytest

from fabric.common.errors import InvalidProducerEpochError, InvalidTxnStateError
from fabric.common.types import ProducerBatch, TopicPartition, TransactionRecord, TransactionWriter
from fabric.coordinator import transactions
from fabric.server.node.transaction_verification import TransactionVerification

TP = ("t", 0)


class Coordinator:
    """The records a test's coordinator holds, and how often a leader asked for one."""

    def __init__(self) -> None:
        self.records: dict[str, TransactionRecord] = {}
        self.asked = 0
        self.on_ask = lambda: None

    def registered(self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition) -> bool:
        """verify_transaction_writer's answer."""
        self.asked += 1
        self.on_ask()
        record = self.records.get(transactional_id, TransactionRecord(transactional_id))
        return transactions.registered(record, producer_id, producer_epoch, tp)

    def join(self, transactional_id: str, sequence: int, *writers: tuple[int, int]) -> None:
        self.records[transactional_id] = TransactionRecord(
            transactional_id, sequence - 1, sequence, tuple(TransactionWriter(p, e, (TP,)) for p, e in writers))


@pytest.fixture
def leader(tmp_path, replicas, storage):
    plog = replicas.open(str(tmp_path / "p"))
    coordinator = Coordinator()
    verification = TransactionVerification(coordinator.registered)

    def append(transactional_id: str, pid: int, value: bytes, sequence: int = 0, epoch: int = 0) -> int:
        return verification.append(transactional_id, TP, ProducerBatch(pid, epoch, sequence), plog, lambda p: (
            plog.append(storage.make_batch([value]), producer=p, transactional=True)))
    return plog, coordinator, verification, append


def test_only_a_registered_writer_opens_a_transaction_and_its_later_batches_cost_no_round_trip(leader) -> None:
    plog, coordinator, _, append = leader
    with pytest.raises(InvalidTxnStateError, match="transactional id .sink. has no open transaction"):
        append("sink", 5, b"forged")
    coordinator.join("sink", 3, (6, 0))
    for pid, epoch in ((6, 1), (7, 0)):  # another epoch, another producer: not what joined
        with pytest.raises(InvalidTxnStateError, match=f"producer {pid} \\(epoch {epoch}\\)"):
            append("sink", pid, b"forged", epoch=epoch)
    with pytest.raises(InvalidTxnStateError):  # the writer, under another transactional id
        append("other", 6, b"x")
    assert plog.end_offset == 0 and plog.last_stable_offset(plog.end_offset) == 0
    asked = coordinator.asked
    assert append("sink", 6, b"a") == 0
    assert append("sink", 6, b"b", sequence=1) == 1  # continues the open transaction: no round trip
    assert coordinator.asked == asked + 1
    assert plog.transactions.open_transactions() == {6: 0}


def test_a_decided_transaction_takes_no_more_batches_and_a_fenced_producer_hears_of_its_epoch(leader) -> None:
    plog, coordinator, verification, append = leader
    coordinator.join("sink", 0, (6, 0), (8, 0))
    append("sink", 6, b"kept")
    append("sink", 8, b"lost")
    coordinator.records["sink"] = TransactionRecord("sink", 0, 0, coordinator.records["sink"].writers, (6,))
    verification.markers_begin(TP)  # the markers the record decided: 6 committed, 8 aborted (epoch + 1)
    plog.write_marker(6, 0, commit=True)
    plog.write_marker(8, 1, commit=False)
    end = plog.end_offset
    with pytest.raises(InvalidTxnStateError, match="has no open transaction"):
        append("sink", 6, b"late", sequence=1)  # its transaction ended: a new one would need a new join
    with pytest.raises(InvalidProducerEpochError, match="epoch 0 is older"):
        append("sink", 8, b"zombie", sequence=1)
    assert plog.end_offset == end and plog.last_stable_offset(end) == end


def test_a_marker_written_while_a_batch_is_verified_makes_it_verify_again(leader) -> None:
    plog, coordinator, verification, append = leader
    coordinator.join("sink", 0, (6, 0))
    coordinator.on_ask = lambda: verification.markers_begin(TP)  # a marker's write begins during the first ask
    with pytest.raises(Exception, match="kept being written"):
        append("sink", 6, b"a")
    assert plog.end_offset == 0
    coordinator.on_ask = lambda: None
    asked = coordinator.asked
    assert append("sink", 6, b"a") == 0
    assert coordinator.asked == asked + 1
