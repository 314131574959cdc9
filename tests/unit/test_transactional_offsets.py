"""A producer transaction's group offsets with each partition's metadata (Kafka's TxnOffsetCommit carries one
per partition): kept across the coordinator's stored record of a committed transaction whose offsets are still to
be applied, and checked by the server as a commit's metadata is. (Typed through Kafka's clients on every kind of
cluster: tests/integration/clients/test_kafka_commit_metadata.py.)"""
from __future__ import annotations

import pytest

from fabric.common.errors import InvalidRequestError
from fabric.common.types import TransactionalOffsets, TransactionRecord
from fabric.coordinator import transactions, validation
from fabric.coordinator.offsets_records import offset_rows


@pytest.mark.parametrize("metadata", ["one for all", {("t", 1): "only p1"}])
def test_a_committed_transactions_pending_offsets_keep_their_metadata_in_the_stored_record(metadata) -> None:
    offsets = TransactionalOffsets("g", {("t", 0): 5, ("t", 1): 7}, metadata, 3, "member-1")
    record = TransactionRecord("app", 4, 4, (), (), offsets)
    text = transactions.to_json(record)
    assert transactions.from_json("app", 4, text) == record
    rows = offset_rows("g", offsets.offsets, offsets.metadata, 1000)
    expected = ["one for all"] * 2 if isinstance(metadata, str) else ["", "only p1"]
    assert [value["metadata"] for _, value in rows] == expected


@pytest.mark.parametrize(("metadata", "message"), [
    ({("t", 9): "x"}, r"offset metadata is given for \('t', 9\), whose offset is not committed"),
    ({("t", 0): 7}, "offset metadata must be a string of at most"),
    ({("t", 0): "x" * 5000}, "offset metadata must be a string of at most"),
    (b"bytes", "offset metadata must be a string of at most"),
])
def test_the_server_refuses_metadata_of_partitions_not_committed_and_metadata_that_is_not_a_short_string(
        metadata, message) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        validation.transactional_offsets(TransactionalOffsets("g", {("t", 0): 1}, metadata))
